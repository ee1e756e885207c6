// `#[classify(reason = display)]` writes the error's `Display`: the type must have one.
use retry_core::Classify;

#[derive(Debug, Classify)]
#[classify(reason = display)]
enum FetchError {
    #[classify(retry)]
    Unavailable,
}

fn main() {}
