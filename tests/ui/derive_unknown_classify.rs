use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retri)]
    Unavailable,
    #[classify(stop)]
    Rejected,
}

fn main() {}
