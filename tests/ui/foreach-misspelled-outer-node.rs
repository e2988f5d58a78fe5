use flowdag::prelude::*;

async fn charge(line: &u32, fee: &u32) -> Result<u32, std::io::Error> {
    Ok(line + fee)
}

async fn fee() -> Result<u32, std::io::Error> {
    Ok(1)
}

workflow! {
    Charges(lines: &[u32]) -> Vec<u32> {
        Sequential {
            base_fee = Operation(fee()),
            charged = ForEach(line in lines.iter()) {
                r = Operation(charge(line, &base_fe)) => r
            },
        }
        => charged.clone()
    }
}

fn main() {}
