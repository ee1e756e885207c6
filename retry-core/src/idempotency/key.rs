//! Idempotency keys: an injective, stable text encoding of the values a request is identified by.

use std::fmt::Write as _;
use std::time::SystemTime;

use crate::time::format_utc;

/// A value that can be part of an idempotency key.
///
/// The format is part of the stored data, so it never changes:
/// - a string is `s<byte length>:<text>` (`"a:b"` → `s3:a:b`), so no separator can be forged;
/// - an integer of any type is `n<decimal>` (`-5` → `n-5`), so widening a field's type keeps keys;
/// - a `bool` is `b0` / `b1`, a `char` is a one-character string, a [`SystemTime`] is
///   `t<fixed-width UTC>`, `None` is `z` and `Some(x)` is `o` followed by `x`;
/// - a tuple joins its parts with `,` (each part is self-delimiting);
/// - a `scope` comes first as `@<scope>/`; a key without scope is unchanged, so keys stored before
///   scopes were used stay valid.
///
/// ```
/// use retry_core::idempotency::encode_key;
///
/// assert_eq!(encode_key(&("a:b", "c")), "s3:a:b,s1:c");
/// assert_ne!(encode_key(&("a:b", "c")), encode_key(&("a", "b:c")));
/// assert_eq!(encode_key(&("sender-7", 42u64)), "s8:sender-7,n42");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be part of an idempotency key",
    label = "not a `KeyPart`",
    note = "keys are strings, integers, `bool`, `char`, `SystemTime`, `Option`s of them, or tuples of up to 8 of these; implement `retry_core::idempotency::KeyPart` for your own type"
)]
pub trait KeyPart {
    /// Appends this value's encoding.
    fn encode_into(&self, out: &mut String);
}

/// The encoding of `key`; see [`KeyPart`] for the format.
pub fn encode_key<K: KeyPart + ?Sized>(key: &K) -> String {
    let mut out = String::new();
    key.encode_into(&mut out);
    out
}

/// The encoding of `key` in `scope` (the tenant or authenticated client): a stored response is
/// only ever returned within the same scope.
///
/// ```
/// use retry_core::idempotency::{encode_key, encode_scoped_key};
///
/// assert_eq!(encode_scoped_key(&"tenant-1", &42u32), "@s8:tenant-1/n42");
/// assert_ne!(encode_scoped_key(&"tenant-1", &42u32), encode_scoped_key(&"tenant-2", &42u32));
/// ```
pub fn encode_scoped_key<S: KeyPart + ?Sized, K: KeyPart + ?Sized>(scope: &S, key: &K) -> String {
    let mut out = String::from("@");
    scope.encode_into(&mut out);
    out.push('/');
    key.encode_into(&mut out);
    out
}

/// The stored form of `key` in `namespace` (the function, or a pinned name such as
/// `"charge.v1"`), optionally within `scope`: `~` and the namespace as a string part, then the
/// scoped or plain key. Every part is self-delimiting, so no namespace, scope or key can forge
/// another's, and two functions sharing a store never answer for each other.
///
/// ```
/// use retry_core::idempotency::encode_namespaced_key;
///
/// assert_eq!(encode_namespaced_key("charge", None::<&str>, &42u32), "~s6:chargen42");
/// assert_eq!(encode_namespaced_key("charge", Some("t1"), &42u32), "~s6:charge@s2:t1/n42");
/// assert_ne!(
///     encode_namespaced_key("charge", None::<&str>, &42u32),
///     encode_namespaced_key("ship", None::<&str>, &42u32)
/// );
/// ```
pub fn encode_namespaced_key<S: KeyPart + ?Sized, K: KeyPart + ?Sized>(
    namespace: &str,
    scope: Option<&S>,
    key: &K,
) -> String {
    let mut out = String::from("~");
    namespace.encode_into(&mut out);
    if let Some(scope) = scope {
        out.push('@');
        scope.encode_into(&mut out);
        out.push('/');
    }
    key.encode_into(&mut out);
    out
}

impl KeyPart for str {
    fn encode_into(&self, out: &mut String) {
        // Writing to a `String` cannot fail.
        let _ = write!(out, "s{}:", self.len());
        out.push_str(self);
    }
}

impl KeyPart for String {
    fn encode_into(&self, out: &mut String) {
        self.as_str().encode_into(out);
    }
}

impl KeyPart for char {
    fn encode_into(&self, out: &mut String) {
        self.encode_utf8(&mut [0; 4]).encode_into(out);
    }
}

impl KeyPart for bool {
    fn encode_into(&self, out: &mut String) {
        out.push_str(if *self { "b1" } else { "b0" });
    }
}

impl KeyPart for SystemTime {
    fn encode_into(&self, out: &mut String) {
        out.push('t');
        out.push_str(&format_utc(*self));
    }
}

impl<T: KeyPart> KeyPart for Option<T> {
    fn encode_into(&self, out: &mut String) {
        match self {
            None => out.push('z'),
            Some(value) => {
                out.push('o');
                value.encode_into(out);
            }
        }
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn encode_into(&self, out: &mut String) {
        (**self).encode_into(out);
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl KeyPart for $t {
            fn encode_into(&self, out: &mut String) {
                // Writing to a `String` cannot fail.
                let _ = write!(out, "n{self}");
            }
        }
    )*};
}
integers!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize
);

macro_rules! tuples {
    ($(($($name:ident),+)),*) => {$(
        impl<$($name: KeyPart),+> KeyPart for ($($name,)+) {
            #[allow(non_snake_case)]
            fn encode_into(&self, out: &mut String) {
                let ($($name,)+) = self;
                let mut first = true;
                $(
                    if !std::mem::take(&mut first) {
                        out.push(',');
                    }
                    $name.encode_into(out);
                )+
            }
        }
    )*};
}
tuples!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H)
);

/// SHA-256 of `text`, as 64 lowercase hex digits: how fingerprints are stored (payloads may be
/// large). A checksum would do for honest clients; a digest without known collisions keeps a
/// hostile one from finding a second payload that passes for the first.
pub(crate) fn digest(text: &str) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;

    let hash = sha2::Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(2 * hash.len());
    for byte in hash {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// Golden values: these strings are stored in databases and must never change.
    #[test]
    fn encodings_are_stable() {
        assert_eq!(encode_key("M-20260819-000123"), "s17:M-20260819-000123");
        assert_eq!(encode_key(&42u8), "n42");
        assert_eq!(encode_key(&-42i64), "n-42");
        assert_eq!(encode_key(&("alice", 7u64, -1i32)), "s5:alice,n7,n-1");
        assert_eq!(encode_key(&(String::from("é"), 'x', true)), "s2:é,s1:x,b1");
        assert_eq!(encode_key(&(None::<u8>, Some("a"))), "z,os1:a");
        let date = UNIX_EPOCH + Duration::from_secs(1_755_569_463);
        assert_eq!(
            encode_key(&("bank", date)),
            "s4:bank,t2025-08-19T02:11:03.000000Z"
        );
        assert_eq!(
            encode_scoped_key("client-9", &("a", 1u8)),
            "@s8:client-9/s1:a,n1"
        );
    }

    /// Stored beside each key: a change makes resends of keys stored before it `KeyReused`.
    #[test]
    fn the_fingerprint_digest_is_sha256() {
        assert_eq!(
            digest("s5:alice"),
            "948b0d094e942b322a8d70aa3e600a16e3a6e4374bd57c5ba9ba64ecc9497862"
        );
    }

    #[test]
    fn encodings_are_injective() {
        let keys = [
            encode_key(&("a:b", "c")),
            encode_key(&("a", "b:c")),
            encode_key(&("a,b", "c")),
            encode_key(&("a", "b,c")),
            encode_key(&("1", 1u8)),
            encode_key(&(1u8, "1")),
            encode_key(&("", "")),
            encode_key(""),
            encode_key(&(Some(""),)),
            encode_scoped_key("a", &"b"),
            encode_scoped_key("a/s1:b", &""),
        ];
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
    }

    #[test]
    fn integer_types_do_not_change_the_key() {
        assert_eq!(encode_key(&7u32), encode_key(&7i64));
        assert_eq!(encode_key(&7u8), encode_key(&7usize));
    }

    // --- properties (the encoding's injectivity is tested through the public API in
    // tests/key_props.rs) ------------------------------------------------------------------

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Fingerprints are stored as 64 lowercase hex digits, whatever the payload.
        #[test]
        fn digests_are_sixty_four_hex_digits(text in ".*") {
            let hex = digest(&text);
            prop_assert_eq!(hex.len(), 64);
            prop_assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{}", hex);
        }

        /// Two payloads that differ in one byte do not share a fingerprint, so a resend with one
        /// changed character is `KeyReused`, never mistaken for the first request.
        #[test]
        fn a_one_byte_change_changes_the_digest(
            text in "[ -~]{1,64}",
            at in any::<prop::sample::Index>(),
            replacement in 0x20u8..=0x7e,
        ) {
            let mut changed = text.clone().into_bytes();
            let at = at.index(changed.len());
            prop_assume!(changed[at] != replacement);
            changed[at] = replacement;
            let changed = String::from_utf8(changed).unwrap();
            prop_assert_ne!(digest(&text), digest(&changed), "{:?} / {:?}", text, changed);
        }

        /// The length prefix is the byte length: a string part's encoding is exactly
        /// `s<len>:` followed by the text, whatever the text holds.
        #[test]
        fn a_string_part_is_its_length_and_its_bytes(text in ".*") {
            let encoded = encode_key(text.as_str());
            let prefix = format!("s{}:", text.len());
            prop_assert!(encoded.starts_with(&prefix), "{}", encoded);
            prop_assert_eq!(&encoded[prefix.len()..], text.as_str());
        }
    }
}
