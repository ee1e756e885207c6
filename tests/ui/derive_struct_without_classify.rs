use retry_core::Classify;

#[derive(Debug, Classify)]
struct Timeout {
    after_ms: u64,
}

fn main() {}
