//! A Rust project: a crate of its own workspace, the SDK crate `idem-guest`
//! in `.idem/sdk/rust` (its manifest made concrete: no `workspace = true`
//! keys), the WIT in `.idem/wit` (its bindings read `../../wit`), and a
//! `Cargo.lock` holding the versions idem's workspace was tested with.

use super::cargo::{Workspace, pruned_lock};
use super::files::{RUST_SDK, WIT};
use super::templates::render;
use super::{File, Project};

const CARGO_TOML: &str = include_str!("templates/rust/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("templates/rust/lib.rs.tmpl");
const BUILD_SH: &str = include_str!("templates/rust/build.sh.tmpl");

pub(super) fn files(p: &Project) -> anyhow::Result<Vec<File>> {
    let workspace = Workspace::parse()?;
    let manifest = render(
        CARGO_TOML,
        p,
        &[
            ("edition", &workspace.package("edition")?.to_string()),
            ("rust_version", &workspace.package("rust-version")?.to_string()),
            ("serde", &workspace.dependency("serde")?),
            ("serde_json", &workspace.dependency("serde_json")?),
        ],
    )?;
    let mut files = vec![
        File::text("Cargo.toml", manifest),
        File::text("Cargo.lock", pruned_lock()?),
        File::text("src/lib.rs", render(LIB_RS, p, &[])?),
        File::script("build.sh", render(BUILD_SH, p, &[])?),
    ];
    for mut file in File::copies(RUST_SDK, "sdk/rust/", ".idem/sdk/rust/") {
        if file.path.ends_with("/Cargo.toml") {
            let header = "# idem's sdk/rust/Cargo.toml, its workspace keys made concrete by `idem new`.\n";
            file.text = format!("{header}{}", workspace.concrete(&file.text)?);
        }
        files.push(file);
    }
    files.extend(File::copies(WIT, "wit/", ".idem/wit/"));
    Ok(files)
}
