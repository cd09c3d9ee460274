//! Process-wide CPU settings for the engine's binaries, applied at the start of `main`: the
//! thread counts and spin time of the compute pools, and the allocator's purge policy.
//!
//! Measured on the tiny-model training step (`model_bench --only train --train-steps 20`, two
//! threads, this repository's 2-core machine):
//! - candle 0.11.1's own worker pool (the `candle-bp-*` threads of its elementwise ops) spins
//!   25,000 rounds before it parks. With two cores that spin takes a core from the rayon workers
//!   of the next matrix product. 5,000 rounds gave about 6,500–6,800 tokens/s against
//!   6,000–6,100 for the default; 100 to 1,000 rounds parked too often (5,700–6,100).
//! - mimalloc returns freed memory to the kernel after a delay (1,000 ms in the mimalloc v3 that
//!   libmimalloc-sys 0.1.49 builds). A training step frees and reallocates tens of megabytes
//!   per op, so the kernel zeroed fresh (transparent huge) pages again and again:
//!   `clear_page_erms` was 27% of the profile. Never purging brought that to 8%. (A 10 ms delay
//!   with the shorter spin fell to about 4,000 tokens/s.) The cost is that the process keeps
//!   its peak heap.
//!
//! - Measured again on an AMD Zen 4 (2 cores, `model_bench --only train`, 30 steps, the
//!   binaries before and after alternating, three runs each): even the shorter spin left three
//!   threads running on two cores whenever candle ran an elementwise op, since our own idle
//!   rayon worker spins too while a step runs (`crate::model::with_workers_awake`), and the
//!   caller then waited for candle's worker (`BarrierGuard::drop`, 2.5% of the profile).
//!   Without candle's pool (`CANDLE_NUM_THREADS=1`: the elementwise ops run on the calling
//!   thread) training ran at 4,995–5,273 tokens/s against 4,515–4,872 with it, the backward
//!   pass at 0.26–0.27 against 0.28–0.31 s.
//!
//! Settings the user has already made in the environment win over these.

// `mi_option_get`/`mi_option_set` are C functions: calling them is `unsafe` though they only
// read and write one of mimalloc's global option values (atomically, from any thread).
#![allow(unsafe_code)]

/// Rounds candle's pool workers spin before they park (candle's default is 25,000).
pub const CANDLE_SPIN_LIMIT: u32 = 5_000;

/// Threads of candle's own pool for its elementwise ops, the calling thread included: 1 runs
/// them on the caller with no pool (see the module's measurements).
pub const CANDLE_POOL_THREADS: usize = 1;

/// mimalloc's `mi_option_purge_delay` (the 16th entry of `mi_option_e` in the `mimalloc.h` of
/// libmimalloc-sys 0.1.49, v2 and v3 alike; `libmimalloc_sys` names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variables a binary should set, with their values, for the ones that are
/// unset: `RAYON_NUM_THREADS` (`n_threads`, else the available parallelism; candle 0.11.1
/// otherwise counts physical cores by reading `/proc/cpuinfo` on every matrix product),
/// `CANDLE_NUM_THREADS` ([`CANDLE_POOL_THREADS`]) and `CANDLE_BARRIER_POOL_SPIN_LIMIT`
/// ([`CANDLE_SPIN_LIMIT`], for a user who gives candle's pool threads again). An `n_threads` of
/// `Some(n > 0)` replaces a `RAYON_NUM_THREADS` that is already set.
///
/// [`prepare_process`] writes them, before the first candle op (candle reads its spin limit
/// once, when its pool starts).
pub fn environment_defaults(n_threads: Option<usize>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    match n_threads {
        Some(n) if n > 0 => out.push(("RAYON_NUM_THREADS", n.to_string())),
        _ if std::env::var_os("RAYON_NUM_THREADS").is_some() => {}
        _ => {
            let n = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            out.push(("RAYON_NUM_THREADS", n.to_string()));
        }
    }
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        out.push(("CANDLE_NUM_THREADS", CANDLE_POOL_THREADS.to_string()));
    }
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        out.push((
            "CANDLE_BARRIER_POOL_SPIN_LIMIT",
            CANDLE_SPIN_LIMIT.to_string(),
        ));
    }
    out
}

/// Applies everything this module asks for: writes [`environment_defaults`] and calls
/// [`keep_freed_memory`]. Binaries call it at the start of `main`.
///
/// # Safety
/// It writes the process environment (`std::env::set_var`), which is only sound while no other
/// thread may read or write it: call it while the process is still single-threaded, or at least
/// before any thread that reads the environment has started.
pub unsafe fn prepare_process(n_threads: Option<usize>) {
    for (key, value) in environment_defaults(n_threads) {
        // SAFETY: the caller guarantees no other thread touches the environment now.
        unsafe { std::env::set_var(key, value) };
    }
    keep_freed_memory();
}

/// Tells mimalloc (when it is the global allocator) to keep freed memory instead of returning
/// it to the kernel, unless `MIMALLOC_PURGE_DELAY` is set. Returns the purge delay in force
/// afterwards, in milliseconds (-1: never).
pub fn keep_freed_memory() -> i64 {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's option values; any thread may call it at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    // SAFETY: reads the option value back.
    #[allow(clippy::useless_conversion)] // `c_long` is 32 bits wide on Windows.
    i64::from(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) })
}

/// The process's peak resident memory so far in MiB (`VmHWM` of `/proc/self/status`), or
/// `None` where the system has no such file (not Linux).
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_hwm_mib(&status)
}

/// `VmHWM` of a `/proc/<pid>/status` text, in MiB (the kernel writes it in kB).
fn vm_hwm_mib(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_memory_is_read_from_the_kernels_status_text() {
        let status = "Name:\tenvace\nVmPeak:\t  900000 kB\nVmHWM:\t  524288 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(vm_hwm_mib(status), Some(512.0));
        assert_eq!(vm_hwm_mib("Name:\tenvace\n"), None);
        if cfg!(target_os = "linux") {
            let mib = peak_rss_mib().expect("Linux has /proc/self/status");
            assert!(mib > 1.0, "a test process holds more than 1 MiB: {mib}");
        }
    }

    #[test]
    fn the_purge_option_is_the_one_mimalloc_reads_from_its_environment_variable() {
        // The bundled mimalloc v3's default purge delay is 1,000 ms (its `options.c`); a wrong
        // option index would read some other option's value here.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: reads one option value.
            let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
            assert!(
                before == 1000 || before == -1,
                "purge delay option read {before}"
            );
            assert_eq!(keep_freed_memory(), -1);
        }
    }

    #[test]
    fn an_explicit_thread_count_replaces_the_environment_and_candles_pool_settings_are_offered() {
        let set = environment_defaults(Some(3));
        assert!(set.contains(&("RAYON_NUM_THREADS", "3".to_owned())));
        if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            assert!(set.contains(&("CANDLE_NUM_THREADS", "1".to_owned())));
        }
        if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
            assert!(set.contains(&("CANDLE_BARRIER_POOL_SPIN_LIMIT", "5000".to_owned())));
        }
        let unset = environment_defaults(None);
        assert_eq!(
            unset.iter().any(|(k, _)| *k == "RAYON_NUM_THREADS"),
            std::env::var_os("RAYON_NUM_THREADS").is_none()
        );
    }
}
