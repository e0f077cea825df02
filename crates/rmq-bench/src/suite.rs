//! The list of cases: every scenario with its parameter grid, in run order,
//! filtered by `--only`.

use rmq::TopicKind;

use crate::consume::consume;
use crate::env::Env;
use crate::latency::latency;
use crate::memory::memory;
use crate::merge::merge_heavy;
use crate::report::Row;
use crate::runner::{run_case, Results};
use crate::send::{send_batch, send_single};
use crate::workload::{BIG_N, KINDS, SEND_N};
use crate::{backlog, bounded, consume_mode, handover, pool};

pub(crate) async fn run_all(env: &Env, only: &[String]) -> Results {
    // `--only NAME` picks scenarios by substring; `--only "NAME PARAMS"` one case of them.
    let wants = |s: &str| {
        only.is_empty()
            || only.iter().any(|o| match o.split_once(' ') {
                Some((name, _)) => s == name,
                None => s.contains(o.as_str()),
            })
    };
    let wants_case = |s: &str, params: &str| {
        only.is_empty()
            || only.iter().any(|o| {
                (!o.contains(' ') && s.contains(o.as_str()))
                    || format!("{s} {params}").contains(o.as_str())
            })
    };
    let mut out = Results::default();
    let send_n = env.n(SEND_N);
    let big_n = env.n(BIG_N);
    if wants("send_single") {
        for kind in KINDS {
            for c in [1u64, 16, 128] {
                let id = ("send_single", kind, format!("concurrency={c}"));
                run_case(env, &mut out, id, send_n, |cl| {
                    send_single(env, cl, kind, c)
                })
                .await;
            }
        }
    }
    if wants("send_batch") {
        for kind in KINDS {
            for b in [100u64, 1000] {
                let id = ("send_batch", kind, format!("batch={b}"));
                run_case(env, &mut out, id, send_n, |cl| send_batch(env, cl, kind, b)).await;
            }
        }
    }
    if wants("consume") {
        for (c, b) in [(1usize, 1usize), (16, 16), (128, 64), (128, 1)] {
            let params = format!("concurrency={c} batch={b}");
            if !wants_case("consume", &params) {
                continue;
            }
            let id = ("consume", TopicKind::Priority, params);
            run_case(env, &mut out, id, 2 * send_n, |cl| consume(env, cl, c, b)).await;
        }
    }
    if wants("backlog") {
        let mut small_rate = None;
        for base in [backlog::SMALL, backlog::LARGE] {
            let pending = env.n(base);
            let id = ("backlog", TopicKind::Priority, format!("pending={pending}"));
            run_case(env, &mut out, id, pending + send_n, |cl| {
                backlog::backlog(env, cl, pending, small_rate)
            })
            .await;
            small_rate = out
                .rows
                .iter()
                .rev()
                .find(|r| r.scenario == "backlog")
                .map(|r| r.rate())
                .or(small_rate);
        }
    }
    if wants("merge_heavy") {
        let id = ("merge_heavy", TopicKind::Priority, "keys=10000".to_string());
        run_case(env, &mut out, id, big_n, |cl| merge_heavy(env, cl)).await;
    }
    if wants("latency") {
        for bg in [false, true] {
            let id = ("latency", TopicKind::FixedTime, format!("background={bg}"));
            run_case(env, &mut out, id, 0, |cl| latency(env, cl, bg)).await;
        }
    }
    if wants("memory") {
        for kind in KINDS {
            for slots in crate::memory::SLOT_COUNTS {
                let label = slots.map(|s| format!("slots={s}")).unwrap_or_default();
                let id = ("memory", kind, label);
                run_case(env, &mut out, id, big_n, |cl| memory(env, cl, kind, slots)).await;
            }
        }
    }
    if wants("consume_mode") {
        let mode_n = consume_mode::mode_n(env);
        let budget = 4 * mode_n + 30_000;
        let id = (
            "consume_mode",
            TopicKind::Priority,
            "mode=parallel".to_string(),
        );
        run_case(env, &mut out, id, budget, |cl| {
            consume_mode::consume_mode(env, cl, false, None)
        })
        .await;
        let parallel_rate = out
            .rows
            .last()
            .filter(|r| r.scenario == "consume_mode")
            .map(Row::rate);
        let id = (
            "consume_mode",
            TopicKind::Priority,
            "mode=serial".to_string(),
        );
        run_case(env, &mut out, id, budget, |cl| {
            consume_mode::consume_mode(env, cl, true, parallel_rate)
        })
        .await;
    }
    if wants("adaptive_pool") {
        // Two rounds in opposite orders, so that neither mode always runs
        // first on a fresh server nor last on a tired one.
        use pool::Mode::{Adaptive, FastAlone, FixedShares};
        let mut alone = None;
        let orders = [
            [FastAlone, FixedShares, Adaptive],
            [Adaptive, FixedShares, FastAlone],
        ];
        let rounds = if env.smoke { 1 } else { 2 };
        for order in orders.into_iter().take(rounds) {
            for mode in order {
                let id = (
                    "adaptive_pool",
                    TopicKind::Priority,
                    mode.label().to_string(),
                );
                let budget = pool::fast_backlog(env) + 20_000;
                run_case(env, &mut out, id, budget, |cl| {
                    pool::adaptive_pool(env, cl, mode, alone)
                })
                .await;
                if mode == FastAlone {
                    alone = out.rows.last().map(Row::rate);
                }
            }
        }
        pool::summary(&out.rows);
    }
    if wants("send_bounded") {
        use bounded::Shape;
        for shape in [Shape::Single(16), Shape::Batch(100)] {
            let id = ("send_bounded", TopicKind::Priority, shape.label());
            run_case(env, &mut out, id, 3 * send_n, |cl| {
                bounded::send_bounded(env, cl, shape)
            })
            .await;
        }
    }
    if wants("handover") {
        let kind = TopicKind::FixedTime;
        let id = ("handover", kind, "case=graceful".to_string());
        run_case(env, &mut out, id, handover::HO_BUDGET_MSGS, |cl| {
            handover::handover_graceful(env, cl, &handover::Coordination::Redis)
        })
        .await;
        let label = "case=crash".to_string();
        match handover::rmq_cli_path() {
            Ok(bin) => {
                let id = ("handover", kind, label);
                run_case(env, &mut out, id, handover::HO_BUDGET_MSGS, |cl| {
                    handover::handover_crash(env, cl, &bin, &handover::Coordination::Redis)
                })
                .await;
            }
            Err(why) if env.smoke => out.skip("handover", kind, &label, why),
            Err(why) => out.fail("handover", kind, &label, why),
        }
    }
    out
}
