//! Generates the shipping stream's gRPC code from `proto/sluice/v1/ship.proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../proto/sluice/v1/ship.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .bytes(".sluice.ship.v1.Shipment.frames")
        .compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
