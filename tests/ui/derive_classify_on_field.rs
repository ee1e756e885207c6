use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    Io(#[classify(delegate)] std::io::Error),
}

fn main() {}
