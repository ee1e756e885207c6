use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retry)]
    #[classify(stop)]
    Unavailable,
    #[classify(stop, retry)]
    Rejected,
    #[classify(retry)]
    #[classify(retry)]
    Busy,
}

fn main() {}
