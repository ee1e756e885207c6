use retry_core::Classify;

#[derive(Debug, Classify)]
#[classify(retry)]
enum FetchError {
    Unavailable,
    Busy,
}

fn main() {}
