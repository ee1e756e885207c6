// `reason = display` is said once, for the whole type: on the enum, not on a variant.
use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retry, reason = display)]
    Unavailable,
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unavailable")
    }
}

fn main() {}
