// User items named like what the derive emits must not be shadowed or clash.
#![allow(dead_code, non_camel_case_types)]

use retry_core::Classify as _;

struct Option;
struct Some;
struct None;
struct Duration;
struct String;
enum core {}
trait Into {}
struct Decision;
trait Classify {}
trait RetryAfterField {}
impl RetryAfterField for u8 {}
const __RETRY_FIELD: u8 = 0;
fn __retry_field() {}

#[derive(Debug, retry_core::Classify)]
enum FetchError<E> {
    #[classify(delegate)]
    Inner(E),
    #[classify(retry_after = __retry_field)]
    Later {
        __retry_field: std::option::Option<std::time::Duration>,
    },
    #[classify(retry_after = 0)]
    Exactly(std::time::Duration),
}

fn main() {
    let later: FetchError<std::io::Error> = FetchError::Later {
        __retry_field: std::option::Option::None,
    };
    assert_eq!(later.classify(), retry_core::Decision::Retry);
}
