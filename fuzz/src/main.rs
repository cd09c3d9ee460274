//! The AFL++ harness: `envace-fuzz TARGET` runs `envace::fuzzing::run(TARGET, input)` on each
//! input AFL++ gives it (a panic aborts, which AFL++ records as a crash).

fn main() {
    let target = std::env::args().nth(1).unwrap_or_default();
    if !envace::fuzzing::TARGETS.contains(&target.as_str()) {
        eprintln!(
            "usage: envace-fuzz TARGET; the targets are {}",
            envace::fuzzing::TARGETS.join(", ")
        );
        std::process::exit(2);
    }
    afl::fuzz!(|data: &[u8]| {
        envace::fuzzing::run(&target, data);
    });
}
