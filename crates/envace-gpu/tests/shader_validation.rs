//! Every file of `shaders/` is a kernel the crate knows, parses and validates with naga after
//! its fragments are pasted in, has one compute entry point `main`, and says in its header what
//! it binds and how its workgroups are sized.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic here is the test failing, with the value.

use std::collections::BTreeSet;
use std::path::Path;

use envace_gpu::Kernel;
use envace_gpu::shaders::{FRAGMENTS, source};

fn wgsl_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".wgsl"))
        .collect()
}

#[test]
fn every_shader_is_a_kernel_that_naga_validates() {
    let shaders = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders");
    let on_disk = wgsl_files(&shaders);
    let known: BTreeSet<String> = Kernel::ALL.iter().map(|k| k.file().to_string()).collect();
    assert_eq!(on_disk, known, "shaders/ and Kernel::ALL disagree");
    let fragments_on_disk: BTreeSet<String> = wgsl_files(&shaders.join("lib"))
        .into_iter()
        .map(|name| format!("lib/{name}"))
        .collect();
    let fragments: BTreeSet<String> = FRAGMENTS.iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(
        fragments_on_disk, fragments,
        "shaders/lib and FRAGMENTS disagree"
    );

    for kernel in Kernel::ALL {
        let file = kernel.file();
        let raw = std::fs::read_to_string(shaders.join(file)).unwrap();
        assert_eq!(
            raw,
            kernel.raw_source(),
            "{file} changed on disk after the build"
        );
        let header: String = raw.lines().take_while(|l| l.starts_with("//")).collect();
        assert!(
            header.contains("Bindings:") && header.contains("Workgroup:"),
            "{file}: the header comment must say its bindings and workgroup size"
        );
        let text = kernel.source().unwrap();
        let module = naga::front::wgsl::parse_str(&text)
            .unwrap_or_else(|e| panic!("{file} does not parse:\n{}", e.emit_to_string(&text)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::default(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{file} does not validate:\n{}", e.emit_to_string(&text)));
        let entries: Vec<(&str, naga::ShaderStage)> = module
            .entry_points
            .iter()
            .map(|e| (e.name.as_str(), e.stage))
            .collect();
        assert_eq!(entries, [("main", naga::ShaderStage::Compute)], "{file}");
    }
}

#[test]
fn an_unknown_fragment_is_an_error_naming_the_file_and_the_fragment() {
    let error = source("broken.wgsl", "//#include lib/missing.wgsl\n").unwrap_err();
    expect_test::expect![[r#"shader broken.wgsl: includes `lib/missing.wgsl`, which is not one of the fragments in shaders/lib (lib/reduce.wgsl, lib/rng.wgsl, lib/quant.wgsl, lib/matmul.wgsl)"#]]
    .assert_eq(&error.to_string());
}
