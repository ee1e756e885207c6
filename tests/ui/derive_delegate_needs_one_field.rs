use retry_core::Classify;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(delegate)]
    Unavailable,
    #[classify(delegate)]
    Both(std::io::Error, std::io::Error),
    #[classify(delegate)]
    Io(std::io::Error),
}

fn main() {}
