//! Placeholder.
#[derive(Debug, Default)]
pub struct BenchOptions;
impl BenchOptions {
    pub fn from_args(_a: &[String]) -> BenchOptions { BenchOptions }
}
pub fn run(_o: &BenchOptions) -> Result<(), String> {
    Ok(())
}
