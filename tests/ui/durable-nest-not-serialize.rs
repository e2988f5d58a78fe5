use flowdag::prelude::*;

/// Neither `Serialize` nor `Deserialize`.
#[derive(Debug, Clone)]
struct Parcel(u64);

/// Not `Serialize`.
#[derive(Debug, Clone)]
struct Line(u64);

async fn pack(line: u64) -> Result<Parcel, std::io::Error> {
    Ok(Parcel(line))
}

async fn count(line: u64) -> Result<u64, std::io::Error> {
    Ok(line)
}

workflow! {
    #[flow(durable)]
    Packing(lines: u64) {
        packed = ForEach(line in 0..lines) {
            parcel = Operation(pack(line))
            => parcel
        }
    }
}

fn lines() -> Vec<Line> {
    vec![Line(1)]
}

workflow! {
    #[flow(durable)]
    Counting(n: u64) -> Vec<u64> {
        counted = ForEach(line in lines()) {
            c = Operation(count(line.0))
            => c
        }
        => counted.clone()
    }
}

fn main() {}
