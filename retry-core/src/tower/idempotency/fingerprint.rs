//! What makes two requests with one key the same operation.

use ::base64::Engine as _;
use ::base64::engine::general_purpose::STANDARD as BASE64;
use ::http::request::Parts;

use crate::idempotency::{digest, encode_key};

/// Deepest JSON nesting canonicalised; a deeper body counts by its bytes. Bounds the recursion,
/// so a hostile body cannot overflow the stack.
const MAX_DEPTH: usize = 128;

/// A fingerprint of what makes two requests the same operation: method, path, query and body.
///
/// A JSON body counts by its canonical form ([`canonical_json`]), not its bytes: key order and
/// whitespace do not make another request. A redrive resends a dead letter's `original`, which
/// went through `serde_json::Value` (keys sorted) on its way into the letter, so byte equality
/// would answer the very resend idempotency exists for with `422`.
pub(super) fn fingerprint(parts: &Parts, body: &[u8]) -> String {
    // Self-delimiting parts, then the body as canonical JSON, text or base64, tagged: injective
    // before hashing.
    let mut text = encode_key(&(parts.method.as_str(), parts.uri.path(), parts.uri.query()));
    let body_text = std::str::from_utf8(body).ok();
    if let Some(json) = body_text.and_then(canonical_json) {
        text.push_str("|j");
        text.push_str(&json);
    } else if let Some(body) = body_text {
        text.push_str("|t");
        text.push_str(body);
    } else {
        text.push_str("|b");
        BASE64.encode_string(body, &mut text);
    }
    digest(&text)
}

/// `text` as canonical JSON: object keys sorted (as `serde_json::Value` sorts them), no
/// whitespace, strings as serde_json writes them, and numbers **exactly as written** (through
/// `serde_json::Value`, `0.1` and `0.10000000000000001` are one `f64`, and integers past
/// 2^64 lose digits). `None` when `text` is not JSON, when an object repeats a key (parsers
/// disagree on which one wins, so `{"to":"alice","to":"mallory"}` must not pass for
/// `{"to":"mallory"}`), or when it nests deeper than [`MAX_DEPTH`]: such a body counts by its
/// bytes.
fn canonical_json(text: &str) -> Option<String> {
    let mut parser = Parser { text, at: 0 };
    let mut out = String::with_capacity(text.len());
    parser.value(&mut out, 0)?;
    parser.skip_whitespace();
    (parser.at == text.len()).then_some(out)
}

/// A recursive-descent reader of one JSON text (RFC 8259), writing its canonical form.
struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next unread character.
    at: usize,
}

impl Parser<'_> {
    fn skip_whitespace(&mut self) {
        let rest = &self.text.as_bytes()[self.at..];
        self.at += rest
            .iter()
            .take_while(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
            .count();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn value(&mut self, out: &mut String, depth: usize) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object(out, depth + 1),
            b'[' => self.array(out, depth + 1),
            b'"' => {
                let string = self.string()?;
                // serde_json's escaping, as the redrive's resend is written.
                out.push_str(&serde_json::to_string(&string).ok()?);
                Some(())
            }
            b't' => self.literal("true", out),
            b'f' => self.literal("false", out),
            b'n' => self.literal("null", out),
            _ => self.number(out),
        }
    }

    fn literal(&mut self, word: &str, out: &mut String) -> Option<()> {
        self.text[self.at..].starts_with(word).then(|| {
            self.at += word.len();
            out.push_str(word);
        })
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, copied as written.
    fn number(&mut self, out: &mut String) -> Option<()> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let digits = |at: usize| {
            let rest = bytes.get(at..).unwrap_or_default();
            rest.iter().take_while(|b| b.is_ascii_digit()).count()
        };
        let mut at = start + usize::from(bytes.get(start) == Some(&b'-'));
        match (bytes.get(at), digits(at)) {
            (Some(b'0'), _) => at += 1,
            (_, 0) => return None,
            (_, n) => at += n,
        }
        if bytes.get(at) == Some(&b'.') {
            let n = digits(at + 1);
            (n > 0).then_some(())?;
            at += 1 + n;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            at += usize::from(matches!(bytes.get(at), Some(b'+' | b'-')));
            let n = digits(at);
            (n > 0).then_some(())?;
            at += n;
        }
        out.push_str(&self.text[start..at]);
        self.at = at;
        Some(())
    }

    /// The string starting at the cursor, decoded (escapes and all) by serde_json.
    fn string(&mut self) -> Option<String> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut at = start + 1;
        loop {
            match bytes.get(at)? {
                b'"' => break,
                b'\\' => at += 2,
                _ => at += 1,
            }
        }
        self.at = at + 1;
        serde_json::from_str(self.text.get(start..self.at)?).ok()
    }

    fn array(&mut self, out: &mut String, depth: usize) -> Option<()> {
        (depth <= MAX_DEPTH).then_some(())?;
        self.at += 1;
        out.push('[');
        if self.eat(b']').is_some() {
            out.push(']');
            return Some(());
        }
        loop {
            self.value(out, depth)?;
            if self.eat(b']').is_some() {
                out.push(']');
                return Some(());
            }
            self.eat(b',')?;
            out.push(',');
        }
    }

    fn object(&mut self, out: &mut String, depth: usize) -> Option<()> {
        (depth <= MAX_DEPTH).then_some(())?;
        self.at += 1;
        let mut members: Vec<(String, String)> = Vec::new();
        if self.eat(b'}').is_none() {
            loop {
                self.skip_whitespace();
                (self.peek()? == b'"').then_some(())?;
                let key = self.string()?;
                self.eat(b':')?;
                let mut value = String::new();
                self.value(&mut value, depth)?;
                members.push((key, value));
                if self.eat(b'}').is_some() {
                    break;
                }
                self.eat(b',')?;
            }
        }
        members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return None;
        }
        out.push('{');
        for (i, (key, value)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).ok()?);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use ::http::Request;

    use super::*;

    fn parts(uri: &str) -> Parts {
        Request::post(uri).body(()).unwrap().into_parts().0
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let base = fingerprint(&parts("/a?x=1"), b"{}");
        assert_eq!(base, fingerprint(&parts("/a?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=2"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/b?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"[]"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"{ "));
        // The same JSON value, however it is written, is the same request.
        assert_eq!(
            fingerprint(&parts("/a"), br#"{"b": 2, "a": [1, "x"]}"#),
            fingerprint(&parts("/a"), br#"{"a":[1,"x"],"b":2}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), br#"{"a":1}"#),
            fingerprint(&parts("/a"), br#"{"a":"1"}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), &[0xff]),
            fingerprint(&parts("/a"), b"/w==")
        );
    }

    /// Bodies that `serde_json::Value` reads as one value but a handler may not.
    #[test]
    fn bodies_serde_json_value_confuses_are_other_requests() {
        for (one, other) in [
            (
                r#"{"cents":12345678901234567890123}"#,
                r#"{"cents":12345678901234567890124}"#,
            ),
            (r#"{"rate":0.1}"#, r#"{"rate":0.10000000000000001}"#),
            (r#"{"to":"alice","to":"mallory"}"#, r#"{"to":"mallory"}"#),
            (r#"{"to":"mallory","to":"alice"}"#, r#"{"to":"alice"}"#),
            (r#"[{"a":1,"a":1}]"#, r#"[{"a":1}]"#),
            ("100", "1e2"),
        ] {
            assert_ne!(
                fingerprint(&parts("/pay"), one.as_bytes()),
                fingerprint(&parts("/pay"), other.as_bytes()),
                "{one} / {other}"
            );
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_keeps_numbers_as_written() {
        let canonical = |text: &str| canonical_json(text);
        assert_eq!(
            canonical(" { \"b\" : [ 1.50 , -0 , 2E+3 ] , \"a\" : { \"\\u00e9\" : null } } "),
            Some(r#"{"a":{"é":null},"b":[1.50,-0,2E+3]}"#.into())
        );
        // What a redrive resends: the original through `serde_json::Value`.
        let sent = r#"{"z": "line\nbreak \u0041", "a": [true, false, 12345678901234567890]}"#;
        let value: serde_json::Value = serde_json::from_str(sent).unwrap();
        assert_eq!(canonical(sent), canonical(&value.to_string()));
        assert_eq!(canonical(sent), Some(value.to_string()));
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\"}",
            "01",
            "1.",
            "-",
            "1e",
            "tru",
            "\"\u{1}\"",
            "{} x",
            "{\"a\":1,\"a\":2}",
            "'a'",
            "[1 2]",
        ] {
            assert_eq!(canonical(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_deep_body_counts_by_its_bytes_without_overflowing() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(canonical_json(&deep), None);
        let deep = fingerprint(&parts("/a"), deep.as_bytes());
        let deeper = format!("{}{}", "[".repeat(100_001), "]".repeat(100_001));
        assert_ne!(deep, fingerprint(&parts("/a"), deeper.as_bytes()));
        let fits = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(canonical_json(&fits).as_deref(), Some(fits.as_str()));
    }
}
