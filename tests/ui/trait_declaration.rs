use retry_core::retryable;

trait Quotes {
    #[retryable(max = 3)]
    async fn quote(&self) -> std::io::Result<u8>;
}

fn main() {}
