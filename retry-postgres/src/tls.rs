//! TLS for the PostgreSQL stores, as the connection string asks for it: `sslmode` and
//! `sslrootcert`, read as libpq reads them, so a URL that works with `psql` works here.
//!
//! | `sslmode` | connection | server certificate |
//! |---|---|---|
//! | absent, `disable`, `prefer` | plain | - |
//! | `require` | TLS | not checked, unless `sslrootcert` names a file: then its chain (libpq's rule) |
//! | `verify-ca` | TLS | its chain, to the CA certificates in `sslrootcert` (a file: required) |
//! | `verify-full` | TLS | its chain and its name (the host), to `sslrootcert`, or to the platform's trust store when `sslrootcert` is absent or `system` |
//!
//! Design notes (the why of each choice):
//! - `prefer` (tokio-postgres's default) stays plain, as before this module: trying TLS first
//!   would make every connection pay for a handshake, and a server whose certificate nobody
//!   trusts would stop working the day TLS was turned on.
//! - `require` without a root file encrypts but does not authenticate the server, exactly as
//!   libpq does (managed services hand out URLs with `sslmode=require` and certificates of
//!   their own CA); the handshake's signatures are still checked, so only the server's identity
//!   is taken on trust. Authenticating it is `verify-full`.
//! - tokio-postgres knows only `disable`, `prefer` and `require`, and no `sslrootcert`: the
//!   connection string it gets has `verify-ca`/`verify-full` turned into `require` and
//!   `sslrootcert` taken out; the certificate checks are the connector's.
//! - The TLS stack (rustls with the ring provider, tokio-postgres-rustls, the platform's trust
//!   store) is the `tls` feature: it about doubles what the crate builds. Without it,
//!   a connection string that asks for TLS fails at `connect`, saying which feature to add,
//!   instead of connecting in the clear.
//! - The provider is passed to rustls explicitly, never installed process-wide: the
//!   application's own choice of provider (or none) is left alone.
//! - Messages name the setting and the root file, never the rest of the connection string (it
//!   may hold a password).

use std::path::PathBuf;

use deadpool_postgres::{Manager, ManagerConfig};
use tokio_postgres::NoTls;

use crate::BoxError;

/// What the connection string asks of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsRequest {
    mode: Mode,
    root: Option<Root>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No TLS: absent, `disable`, `prefer`, or a value tokio-postgres judges for itself.
    Plain,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the CA certificates are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Root {
    /// A PEM file of one or more certificates.
    File(PathBuf),
    /// `system`: the platform's trust store.
    System,
}

/// Takes the TLS settings out of `url`: the connection string for tokio-postgres (untouched
/// unless it says `sslrootcert`, `verify-ca` or `verify-full`) and what it asks for.
///
/// A `key=value` list this cannot read goes to tokio-postgres as it is, for its own error
/// message; that is safe, as tokio-postgres never connects in the clear when told
/// `sslmode=require` without a TLS connector.
pub(crate) fn split(url: &str) -> Result<(String, TlsRequest), BoxError> {
    let mut request = TlsRequest {
        mode: Mode::Plain,
        root: None,
    };
    let Some(params) = Params::parse(url) else {
        return Ok((url.to_owned(), request));
    };
    let mut rewrite = false;
    for (key, value) in params.pairs() {
        match key.as_str() {
            "sslmode" => {
                request.mode = match value.as_str() {
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    _ => Mode::Plain,
                };
                rewrite |= matches!(request.mode, Mode::VerifyCa | Mode::VerifyFull);
            }
            "sslrootcert" => {
                request.root = Some(match value.as_str() {
                    "system" => Root::System,
                    path => Root::File(PathBuf::from(path)),
                });
                rewrite = true;
            }
            _ => {}
        }
    }
    request.check()?;
    if !rewrite {
        return Ok((url.to_owned(), request));
    }
    let url = params.rewrite(|key, value| match key {
        "sslrootcert" => Keep::Drop,
        "sslmode" if matches!(value, "verify-ca" | "verify-full") => Keep::Replace("require"),
        _ => Keep::AsIs,
    });
    Ok((url, request))
}

impl TlsRequest {
    /// The combinations libpq refuses, refused here too, before any connection.
    fn check(&self) -> Result<(), BoxError> {
        match (self.mode, &self.root) {
            (Mode::VerifyCa, None | Some(Root::System)) => Err(
                "sslmode=verify-ca needs sslrootcert=<file of the CA certificates to check the server's chain against>"
                    .into(),
            ),
            (Mode::Require, Some(Root::System)) => Err(
                "sslrootcert=system needs sslmode=verify-full (the platform's trust store vouches for names, so the name must be checked)"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// Whether the connection must be encrypted.
    pub(crate) fn wants_tls(&self) -> bool {
        self.mode != Mode::Plain
    }

    /// The pool's manager for `config`, with the TLS connector this request needs.
    pub(crate) fn manager(
        &self,
        config: tokio_postgres::Config,
        manager: ManagerConfig,
    ) -> Result<Manager, BoxError> {
        if !self.wants_tls() {
            return Ok(Manager::from_config(config, NoTls, manager));
        }
        #[cfg(feature = "tls")]
        {
            let tls =
                tokio_postgres_rustls::MakeRustlsConnect::new(connector::client_config(self)?);
            Ok(Manager::from_config(config, tls, manager))
        }
        #[cfg(not(feature = "tls"))]
        {
            drop((config, manager));
            Err("the connection string asks for TLS (sslmode=require, verify-ca or verify-full), which needs retry-postgres's `tls` feature".into())
        }
    }
}

/// The connection string's `key=value` pairs, in either form tokio-postgres reads: a
/// `postgres://` URL (its query) or libpq's `key=value` list.
enum Params {
    /// The URL up to its query, and the query's raw `key=value` pieces.
    Url { base: String, pieces: Vec<String> },
    /// Each pair, its value unquoted.
    KeyValue(Vec<(String, String)>),
}

impl Params {
    fn parse(url: &str) -> Option<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (base, query) = url.split_once('?').unwrap_or((url, ""));
            return Some(Params::Url {
                base: base.to_owned(),
                pieces: query
                    .split('&')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect(),
            });
        }
        key_value_pairs(url).map(Params::KeyValue)
    }

    /// Each pair, decoded.
    fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Params::Url { pieces, .. } => pieces
                .iter()
                .map(|piece| {
                    let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
                    (percent_decode(key), percent_decode(value))
                })
                .collect(),
            Params::KeyValue(pairs) => pairs.clone(),
        }
    }

    /// The connection string again, each pair as `keep` says.
    fn rewrite(&self, keep: impl Fn(&str, &str) -> Keep) -> String {
        match self {
            Params::Url { base, pieces } => {
                let kept: Vec<String> = pieces
                    .iter()
                    .zip(self.pairs())
                    .filter_map(|(piece, (key, value))| match keep(&key, &value) {
                        Keep::Drop => None,
                        Keep::AsIs => Some(piece.clone()),
                        // Only ever a plain word ("require"): nothing to encode.
                        Keep::Replace(with) => Some(format!("{key}={with}")),
                    })
                    .collect();
                if kept.is_empty() {
                    base.clone()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            Params::KeyValue(pairs) => pairs
                .iter()
                .filter_map(|(key, value)| {
                    let value = match keep(key, value) {
                        Keep::Drop => return None,
                        Keep::AsIs => value.as_str(),
                        Keep::Replace(with) => with,
                    };
                    let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                    Some(format!("{key}='{quoted}'"))
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// What [`Params::rewrite`] does with one pair.
enum Keep {
    Drop,
    AsIs,
    Replace(&'static str),
}

/// libpq's `key = value` list: values bare (up to white space) or single-quoted, with `\`
/// escaping the next character in both. `None` when it is not one.
fn key_value_pairs(text: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Some(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return None;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if_eq(&'\'').is_some();
        loop {
            match chars.next() {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => break,
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => value.extend(chars.next()),
                Some(c) => value.push(c),
            }
        }
        pairs.push((key, value));
    }
}

/// `%XX` decoded as tokio-postgres decodes URL parts (with the same crate); a `%` not followed
/// by two hex digits is kept as it is.
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(feature = "tls")]
mod connector {
    //! The rustls side: a client configuration whose certificate checks are the request's.

    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{
        CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    };

    use super::{BoxError, Mode, Root, TlsRequest};

    /// The client configuration for `request` (which wants TLS).
    pub(super) fn client_config(request: &TlsRequest) -> Result<ClientConfig, BoxError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (request.mode, &request.root) {
            (Mode::VerifyFull, None | Some(Root::System)) => Arc::new(
                rustls_platform_verifier::Verifier::new(provider.clone())
                    .map_err(|e| format!("the platform's trust store cannot be used: {e}"))?,
            ),
            (Mode::VerifyFull, Some(Root::File(path))) => webpki(path, &provider)?,
            (Mode::Require | Mode::VerifyCa, Some(Root::File(path))) => Arc::new(NameUnchecked {
                chain: Some(webpki(path, &provider)?),
                provider: provider.clone(),
            }),
            (Mode::Require, None) => Arc::new(NameUnchecked {
                chain: None,
                provider: provider.clone(),
            }),
            // Refused by `TlsRequest::check`; `Plain` never asks for a connector.
            (Mode::Require | Mode::VerifyCa, Some(Root::System)) | (Mode::VerifyCa, None) => {
                return Err("sslmode=verify-ca needs sslrootcert=<file>".into());
            }
            (Mode::Plain, _) => return Err("no TLS was asked for".into()),
        };
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth())
    }

    /// A verifier of the chain and the name, against the CA certificates in `path`.
    fn webpki(
        path: &std::path::Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<WebPkiServerVerifier>, BoxError> {
        let shown = path.display();
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("sslrootcert={shown}: cannot read its certificates: {e}"))?;
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("sslrootcert={shown}: no usable CA certificate in it").into());
        }
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("sslrootcert={shown}: {e}").into())
    }

    /// `require` and `verify-ca`: the server's chain is checked against the root file's CA
    /// certificates when there is one (`require` without one checks no certificate: libpq's
    /// rule), its name never. The handshake's signatures are always checked, with the
    /// certificate's key. webpki checks the chain before the name, so a name mismatch means the
    /// chain passed.
    #[derive(Debug)]
    struct NameUnchecked {
        chain: Option<Arc<WebPkiServerVerifier>>,
        provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for NameUnchecked {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else {
                return Ok(ServerCertVerified::assertion());
            };
            match chain.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.provider.signature_verification_algorithms;
            rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(url: &str) -> (String, TlsRequest) {
        split(url).unwrap()
    }

    #[test]
    fn a_string_without_tls_settings_is_left_alone() {
        for url in [
            "postgres://app:s3cret@db/payments",
            "postgres://app@db/payments?sslmode=prefer&connect_timeout=5",
            "host=db user=app password='s 3' dbname=payments",
            // tokio-postgres judges values it does not know.
            "postgres://app@db/payments?sslmode=sometimes",
        ] {
            let (passed, tls) = request(url);
            assert_eq!(passed, url);
            assert!(!tls.wants_tls(), "{url}");
        }
    }

    #[test]
    fn require_asks_for_tls_without_a_root_and_is_passed_on() {
        for url in [
            "postgres://app@db/payments?sslmode=require",
            "host=db user=app sslmode=require",
            "host=db user=app sslmode = 'require'",
        ] {
            let (passed, tls) = request(url);
            assert_eq!(passed, url);
            assert_eq!(
                tls,
                TlsRequest {
                    mode: Mode::Require,
                    root: None
                }
            );
        }
    }

    #[test]
    fn verify_modes_become_require_and_the_root_is_taken_out() {
        let (passed, tls) = request(
            "postgres://app:s3cret@db:5433/payments?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fetc%2Fdb%20ca.pem&application_name=shop",
        );
        assert_eq!(
            passed,
            "postgres://app:s3cret@db:5433/payments?connect_timeout=5&sslmode=require&application_name=shop"
        );
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root, Some(Root::File("/etc/db ca.pem".into())));

        let (passed, tls) = request(
            r"host=db user=app password='it\'s s3cret' sslmode=verify-ca sslrootcert='/etc/db ca.pem'",
        );
        assert_eq!(
            passed,
            r"host='db' user='app' password='it\'s s3cret' sslmode='require'"
        );
        assert_eq!(tls.mode, Mode::VerifyCa);
        assert_eq!(tls.root, Some(Root::File("/etc/db ca.pem".into())));
        // What tokio-postgres reads back is what was written.
        let config: tokio_postgres::Config = passed.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"it's s3cret"[..]));

        let (passed, tls) = request("postgres://db/x?sslrootcert=system&sslmode=verify-full");
        assert_eq!(passed, "postgres://db/x?sslmode=require");
        assert_eq!(tls.root, Some(Root::System));
        let (passed, _) = request("postgres://db/x?sslmode=verify-full");
        assert_eq!(passed, "postgres://db/x?sslmode=require");
    }

    #[test]
    fn libpq_refusals_are_refused_without_echoing_the_string() {
        for url in [
            "postgres://app:s3cret@db/x?sslmode=verify-ca",
            "postgres://app:s3cret@db/x?sslmode=verify-ca&sslrootcert=system",
            "postgres://app:s3cret@db/x?sslmode=require&sslrootcert=system",
        ] {
            let error = split(url).unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
            assert!(error.contains("sslrootcert="), "{url}: {error}");
        }
    }

    #[test]
    fn a_list_that_cannot_be_read_goes_on_as_it_is_for_tokio_postgres_to_refuse() {
        for url in [
            "host=db password=s3cret sslmode='require",
            "host=db password=s3cret sslmode",
        ] {
            let (passed, tls) = request(url);
            assert_eq!(passed, url);
            assert!(!tls.wants_tls());
            assert!(url.parse::<tokio_postgres::Config>().is_err(), "{url}");
        }
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn every_mode_makes_a_client_configuration() {
        for url in [
            "postgres://db/x?sslmode=require",
            "postgres://db/x?sslmode=verify-full",
            "postgres://db/x?sslmode=verify-full&sslrootcert=system",
        ] {
            let (_, tls) = request(url);
            connector::client_config(&tls).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        let (_, tls) = request("postgres://db/x?sslmode=verify-ca&sslrootcert=/nonexistent.pem");
        let error = connector::client_config(&tls).unwrap_err().to_string();
        assert!(
            error.starts_with("sslrootcert=/nonexistent.pem: cannot read"),
            "{error}"
        );
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn without_the_feature_tls_is_refused_naming_it() {
        let (_, tls) = request("postgres://db/x?sslmode=require");
        let error = tls
            .manager("host=db".parse().unwrap(), ManagerConfig::default())
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("retry-postgres's `tls` feature"), "{error}");
    }
}
