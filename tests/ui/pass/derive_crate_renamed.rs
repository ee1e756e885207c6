// `#[classify(crate = path)]` reaches the runtime under another name, and a local module called
// `retry_core` does not confuse the generated code.
extern crate retry_core as renamed_retry;

mod retry_core {}

use renamed_retry::{Classify, Decision};

#[derive(Debug, Classify)]
#[classify(crate = renamed_retry)]
enum FetchError {
    #[classify(retry)]
    Busy,
    #[classify(delegate)]
    Io(std::io::Error),
    #[classify(retry_after = 0)]
    Later(std::time::Duration),
}

#[derive(Debug, Classify)]
#[classify(crate = renamed_retry, stop)]
struct Rejected;

fn main() {
    assert_eq!(FetchError::Busy.classify(), Decision::Retry);
    assert_eq!(Rejected.classify(), Decision::Stop);
}
