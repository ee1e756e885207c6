// `reason` takes `display`: the error's `Display` becomes its reason.
use retry_core::Classify;

#[derive(Debug, Classify)]
#[classify(reason = debug)]
enum FetchError {
    #[classify(retry)]
    Unavailable,
}

fn main() {}
