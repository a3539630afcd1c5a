//! What draws over a screen: the help and the quit and stop dialogs.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use super::theme::{MARK_ABOVE, MARK_BELOW, MARK_COMPLETE, MARK_FAILED, MARK_PRUNED, Theme};
use crate::tui::state::{Mode, Overlay, Screen, UiState};

pub(super) fn render_overlay(
    frame: &mut Frame,
    area: Rect,
    state: &UiState,
    o: Overlay,
    theme: &Theme,
) {
    let (title, lines): (String, Vec<Line>) = match o {
        Overlay::Help if state.screen == Screen::Insight => {
            let mut keys: Vec<(&str, &str)> = vec![
                ("Tab / ← →", "next / previous view: importance and slice,"),
                ("", "pair, parallel coordinates, slots' timeline"),
                ("n N / ↓ ↑", "next / previous parameter (▸)"),
                ("m M", "next / previous second parameter of the pair (▹)"),
            ];
            if !state.others().is_empty() {
                keys.push(("o", "next objective (importance, slice, pair, parallel)"));
            }
            if state.mode == Mode::Live {
                keys.push(("p / space", "pause or resume starting new trials"));
            }
            keys.extend([
                ("Esc / i / q", "back to the study"),
                ("?", "this help; any key closes it"),
            ]);
            let lines = key_lines(keys, theme)
                .chain([
                    Line::raw(""),
                    Line::from(Span::styled(
                        format!(" marks: {MARK_COMPLETE} complete  {MARK_PRUNED} pruned  {MARK_FAILED} failed (at their last value)"),
                        theme.dim(),
                    )),
                    Line::from(Span::styled(
                        " importance: PED-ANOVA, as `tune importance`; recomputed as trials",
                        theme.dim(),
                    )),
                    Line::from(Span::styled(
                        " complete (every 5% more on a large study, or 10 s)",
                        theme.dim(),
                    )),
                ])
                .collect();
            (" Insight keys ".into(), lines)
        }
        Overlay::Help => {
            let mut keys: Vec<(&str, &str)> = vec![
                ("↑↓ j k", "move in the trials table"),
                ("PgUp PgDn g G", "page, first, last"),
                ("s / ← →", "sort by the next / previous column"),
                ("1-9", "sort by that column; again to reverse"),
                ("r", "reverse the sort"),
                (
                    "f",
                    "filter by state: all, running, complete, pruned, failed",
                ),
                ("l", "objective chart: log or linear scale"),
                ("i", "insight: importance, slice, pair, parallel, timeline"),
                ("Enter", "open the trial: params, curve, error, logs"),
                ("Esc", "back to the study"),
            ];
            if state.mode == Mode::Live {
                keys.extend([
                    ("p / space", "pause or resume starting new trials"),
                    ("x", "stop the selected running trial (pruned or failed)"),
                    ("q / Ctrl-C", "quit: stop the study, or let trials finish"),
                ]);
            } else {
                keys.push(("q", "leave (watch only reads: the study goes on)"));
            }
            keys.push(("?", "this help; any key closes it"));
            let lines = key_lines(keys, theme)
                .chain([
                    Line::raw(""),
                    Line::from(Span::styled(
                        format!(" chart marks: {MARK_COMPLETE} complete  {MARK_PRUNED} pruned  {MARK_FAILED} failed  {MARK_ABOVE}{MARK_BELOW} off-scale  line: best"),
                        theme.dim(),
                    )),
                ])
                .chain(
                    state
                        .info
                        .as_ref()
                        .and_then(|i| Some((i.pruner.as_str(), i.rungs.as_ref()?)))
                        .map(|(pruner, r)| {
                            Line::from(Span::styled(
                                format!(" pruner: {pruner}, {}", r.text()),
                                theme.dim(),
                            ))
                        }),
                )
                .collect();
            (" Keys ".into(), lines)
        }
        Overlay::Quit => (
            " Quit ".into(),
            vec![
                Line::raw(" Quit the study?"),
                Line::raw(""),
                Line::from(vec![
                    Span::styled(" s ", theme.header()),
                    Span::raw("stop now: running trials are stopped"),
                ]),
                Line::from(vec![
                    Span::styled(" w ", theme.header()),
                    Span::raw("wait: start no new trial, let running ones finish"),
                ]),
                Line::from(vec![
                    Span::styled(" Esc ", theme.header()),
                    Span::raw("cancel"),
                ]),
            ],
        ),
        Overlay::StopTrial(n) => (
            format!(" Stop trial {n} "),
            vec![
                Line::raw(format!(" Stop trial {n} and record it as:")),
                Line::raw(""),
                Line::from(vec![
                    Span::styled(" p ", theme.header()),
                    Span::raw("pruned (its last value counts for the pruner)"),
                ]),
                Line::from(vec![
                    Span::styled(" f ", theme.header()),
                    Span::raw("failed"),
                ]),
                Line::from(vec![
                    Span::styled(" Esc ", theme.header()),
                    Span::raw("cancel"),
                ]),
            ],
        ),
    };
    let want_w = lines.iter().map(|l| l.width()).max().unwrap_or(20) as u16 + 3;
    let w = want_w.min(area.width.saturating_sub(2)).max(10);
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(Span::styled(title, theme.title()))),
        r,
    );
}

/// The help overlay's lines for `keys` (the key, then what it does).
fn key_lines<'a>(
    keys: Vec<(&'a str, &'a str)>,
    theme: &Theme,
) -> impl Iterator<Item = Line<'a>> + use<'a> {
    let style = theme.header();
    keys.into_iter()
        .map(move |(k, w)| Line::from(vec![Span::styled(format!(" {k:<14}"), style), Span::raw(w)]))
}
