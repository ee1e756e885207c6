use retry_core::Classify;

#[derive(Debug)]
struct ParseError;

#[derive(Debug, Classify)]
enum FetchError {
    #[classify(delegate)]
    Parse(ParseError),
}

fn main() {}
