use retry_core::dlq::{DlqFailed, MemoryDeadLetters};
use retry_core::{retryable, Classify, Decision};

#[derive(Debug)]
struct Declined;

impl Classify for Declined {
    fn classify(&self) -> Decision {
        Decision::Stop
    }
}

impl From<DlqFailed> for Declined {
    fn from(_: DlqFailed) -> Self {
        Declined
    }
}

#[retryable(max = 3, dlq(sink = letters, id = id, original = id, classes = "transient"))]
async fn charge(letters: &MemoryDeadLetters, id: &str) -> Result<(), Declined> {
    Err(Declined)
}

fn main() {}
