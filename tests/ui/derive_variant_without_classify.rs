use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(retry)]
    Unavailable,
    /// Says nothing: should a rejected request be retried?
    Rejected { status: u16 },
}

fn main() {}
