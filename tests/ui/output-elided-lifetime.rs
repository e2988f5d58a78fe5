use flowdag::prelude::*;

pub struct Catalog {
    pub names: Vec<String>,
}

async fn find(catalog: &Catalog, name: &str) -> Result<usize, std::io::Error> {
    catalog
        .names
        .iter()
        .position(|n| n == name)
        .ok_or_else(|| std::io::Error::other("not found"))
}

workflow! {
    Lookup(catalog: &Catalog, name: &str) -> &String {
        index = Operation(find(catalog, name))
        => &catalog.names[index]
    }
}

fn main() {}
