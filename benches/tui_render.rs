//! Render time per frame of the live UI with 10 000 trials in the study (issue 6; goal: under
//! 5 ms). Plain harness: `cargo bench --bench tui_render [-- FRAMES]`.

fn main() {
    let frames = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u32>().ok())
        .unwrap_or(200);
    let results = tune::tui::bench::run_render_bench(frames);
    let worst = results
        .iter()
        .filter(|(what, _)| what.starts_with("render"))
        .map(|(_, ms)| *ms)
        .fold(0.0_f64, f64::max);
    println!("tui render: worst {worst:.3} ms/frame (goal < 5 ms)");
    match tune::bench::watch_poll::watch_poll_ms(10_000) {
        Ok([first, idle, one]) => println!(
            "tui watch: 10000 trials, 30000 reports: first poll {first:.1} ms, \
             a poll with nothing committed {idle:.3} ms, a poll after one report {one:.1} ms"
        ),
        Err(e) => eprintln!("tui watch bench failed: {e}"),
    }
}
