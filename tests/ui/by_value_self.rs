use retry_core::retryable;

struct Client;

impl Client {
    #[retryable(max = 3)]
    async fn fetch(self) -> std::io::Result<u8> {
        Ok(1)
    }
}

fn main() {}
