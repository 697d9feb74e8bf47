//! A TypeScript project: `handler.ts` (and a `tsconfig.json` for editors),
//! the SDK `@idem/handler` with its build tool and the lock of its pinned
//! toolchain in `.idem/sdk/typescript` (build.sh installs the toolchain once
//! per machine and links it there), and the WIT in `.idem/wit`, where that tool
//! looks (`tools/build.mjs` reads `../../wit` from the SDK's folder).

use super::files::{TS_SDK, WIT};
use super::templates::render;
use super::{File, Project};

const HANDLER_TS: &str = include_str!("templates/ts/handler.ts.tmpl");
const TSCONFIG: &str = include_str!("templates/ts/tsconfig.json.tmpl");
const BUILD_SH: &str = include_str!("templates/ts/build.sh.tmpl");

pub(super) fn files(p: &Project) -> anyhow::Result<Vec<File>> {
    let mut files = vec![
        File::text("handler.ts", render(HANDLER_TS, p, &[])?),
        File::text("tsconfig.json", render(TSCONFIG, p, &[])?),
        File::script("build.sh", render(BUILD_SH, p, &[])?),
    ];
    files.extend(File::copies(TS_SDK, "sdk/typescript/", ".idem/sdk/typescript/"));
    files.extend(File::copies(WIT, "wit/", ".idem/wit/"));
    Ok(files)
}
