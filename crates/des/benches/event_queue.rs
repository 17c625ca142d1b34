//! Criterion benchmark of the event queue: the hold model (pop one, push one at a random
//! future time) at steady-state sizes typical of the packet engine.
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use reducelab_des::{EventQueue, Rng, SimTime};

fn hold(c: &mut Criterion) {
    let mut group = c.benchmark_group("event_queue_hold");
    for &size in &[1_000usize, 100_000, 1_000_000] {
        group.throughput(Throughput::Elements(100_000));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            let mut rng = Rng::new(1);
            let mut q: EventQueue<[u32; 3]> = EventQueue::with_capacity(size + 1);
            for i in 0..size {
                q.push(SimTime(rng.below(1_000_000)), [i as u32, 0, 0]);
            }
            b.iter(|| {
                for _ in 0..100_000 {
                    let (t, e) = q.pop().unwrap();
                    q.push(SimTime(t.0 + 1 + rng.below(1_000_000)), black_box(e));
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, hold);
criterion_main!(benches);
