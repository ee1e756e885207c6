use retry_core::dlq::DlqFailed;
use retry_core::retryable;

#[derive(Debug)]
struct Failed;

impl From<DlqFailed> for Failed {
    fn from(_: DlqFailed) -> Self {
        Failed
    }
}

impl retry_core::Classify for Failed {
    fn classify(&self) -> retry_core::Decision {
        retry_core::Decision::Retry
    }
}

#[retryable(max = 3, dlq(sink = letters, id = id, original = id))]
async fn submit(letters: &Vec<String>, id: &str) -> Result<(), Failed> {
    Err(Failed)
}

fn main() {}
