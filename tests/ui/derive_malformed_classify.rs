use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify]
    A,
    #[classify()]
    B,
    #[classify = "retry"]
    C,
    #[classify(retry = true)]
    D,
    #[classify(retry_after)]
    E(std::time::Duration),
    #[classify(retry_after = "0")]
    F(std::time::Duration),
    #[classify(crate = retry_core)]
    G,
}

fn main() {}
