//! A Python project: `app.py`, the SDK package `idem` in `.idem/sdk/python`
//! and the WIT in `.idem/wit`, built by componentize-py.

use super::files::{PYTHON_SDK, WIT};
use super::templates::render;
use super::{File, Project};

const APP_PY: &str = include_str!("templates/python/app.py.tmpl");
const BUILD_SH: &str = include_str!("templates/python/build.sh.tmpl");

pub(super) fn files(p: &Project) -> anyhow::Result<Vec<File>> {
    let mut files =
        vec![File::text("app.py", render(APP_PY, p, &[])?), File::script("build.sh", render(BUILD_SH, p, &[])?)];
    files.extend(File::copies(PYTHON_SDK, "sdk/python/", ".idem/sdk/python/"));
    files.extend(File::copies(WIT, "wit/", ".idem/wit/"));
    Ok(files)
}
