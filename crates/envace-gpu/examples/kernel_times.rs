//! Times each kernel alone at one decoding step's shapes (`--hidden`, `--vocab`, `--rows`), 20
//! dispatches in one batch, to find where a step's time goes on an adapter.
//!
//! `cargo run --release -p envace-gpu --example kernel_times [-- --rows 1 --hidden 256 --vocab 4096]`

use std::time::Instant;

use envace_gpu::{Batch, Error, Gpu, Rows, Weight, WeightFormat};

/// One kernel call recorded into a batch.
type Case<'a> = Box<dyn Fn(&mut Batch<'_>) -> Result<(), Error> + 'a>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut rows = 1usize;
    let mut hidden = 256usize;
    let mut vocab = 4096usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok()).ok_or("a number")?;
        match arg.as_str() {
            "--rows" => rows = value,
            "--hidden" => hidden = value,
            "--vocab" => vocab = value,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let gpu = Gpu::open(None)?;
    eprintln!("adapter: {}", gpu.describe());
    let x = gpu.upload("x", &vec![0.5f32; rows * hidden])?;
    let head = Weight {
        buf: gpu.upload("head", &vec![0.01f32; vocab * hidden])?,
        n: vocab,
        k: hidden,
        format: WeightFormat::F32,
    };
    let square = Weight {
        buf: gpu.upload("square", &vec![0.01f32; hidden * hidden])?,
        n: hidden,
        k: hidden,
        format: WeightFormat::F32,
    };
    let out = gpu.zeros("out", rows * vocab)?;
    let norm_w = gpu.upload("norm", &vec![1f32; hidden])?;
    let cases: Vec<(&str, Case<'_>)> = vec![
        (
            "matmul hidden x hidden",
            Box::new(|b| {
                b.matmul(
                    &x,
                    Rows::dense(rows, hidden),
                    &square,
                    &out,
                    Rows::dense(rows, hidden),
                )
            }),
        ),
        (
            "matmul head",
            Box::new(|b| {
                b.matmul(
                    &x,
                    Rows::dense(rows, hidden),
                    &head,
                    &out,
                    Rows::dense(rows, vocab),
                )
            }),
        ),
        (
            "rms_norm",
            Box::new(|b| b.rms_norm(&x, Rows::dense(rows, hidden), &norm_w, &out, 1e-6)),
        ),
        ("add", Box::new(|b| b.add(&out, &x, rows * hidden))),
    ];
    for (name, case) in &cases {
        let mut batch = gpu.batch();
        case(&mut batch)?;
        gpu.submit(batch)?;
        let start = Instant::now();
        let mut batch = gpu.batch();
        for _ in 0..20 {
            case(&mut batch)?;
        }
        gpu.submit(batch)?;
        println!(
            "{name}: {:.3} ms per dispatch",
            start.elapsed().as_secs_f64() * 1e3 / 20.0
        );
    }
    let start = Instant::now();
    for _ in 0..20 {
        gpu.read::<f32>(&x)?;
    }
    println!(
        "read back {} values: {:.3} ms",
        rows * hidden,
        start.elapsed().as_secs_f64() * 1e3 / 20.0
    );
    let start = Instant::now();
    for _ in 0..20 {
        gpu.zeros("scratch", rows * vocab)?;
    }
    println!(
        "new buffer of {} values: {:.3} ms",
        rows * vocab,
        start.elapsed().as_secs_f64() * 1e3 / 20.0
    );
    Ok(())
}
