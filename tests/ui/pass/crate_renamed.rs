// `crate = path` reaches the runtime under another name, and a local module called
// `retry_core` does not confuse the generated code.
extern crate retry_core as renamed_retry;

mod retry_core {}

use renamed_retry::retryable;

#[retryable(crate = renamed_retry, max = 2, base = "1ms")]
async fn fetch() -> std::io::Result<u8> {
    Ok(1)
}

fn main() {
    let _ = fetch();
}
