//! Generates the `sluice.v1` gRPC code from `proto/sluice/v1/admin.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/sluice/v1/admin.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure().compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
