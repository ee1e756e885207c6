// User items named like what the macro emits must not be shadowed or clash.
#![allow(dead_code, non_camel_case_types)]

use retry_core::retryable;

struct Option;
struct Result;
struct Some;
enum core {}
fn loop_() {}
const __RETRY_POLICY: u8 = 0;

#[retryable(max = 2, base = "1ms")]
async fn fetch(__retry_state: u8, __retry_slot0: u8) -> std::result::Result<u8, std::io::Error> {
    let __retry_last = __retry_state + __retry_slot0 + __RETRY_POLICY;
    Ok(__retry_last)
}

fn main() {
    let _ = fetch(1, 2);
}
