use flowdag::prelude::*;

struct Connection;

async fn connect(host: &str) -> Result<Connection, std::io::Error> {
    let _ = host;
    Ok(Connection)
}

async fn ping(_: &Connection) -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    #[flow(durable)]
    Probe(host: String) -> u32 {
        Sequential {
            conn = Operation(connect(&host)),
            rtt = Operation(ping(&conn)),
        }
        => rtt
    }
}

fn main() {}
