// The realistic 50-node workflow of the benchmarks (47 operations and 3 decisions): an order
// pipeline with every construct of the language. The including module imports the operation as
// `op`. `common::hand::mixed` is the same work written by hand with `try_join!`.
workflow! {
    /// An order pipeline of 50 nodes: Sequential, Parallel (one with `max_concurrency`),
    /// Conditionals with and without `else`, `after`, data read from several nodes.
    pub Mixed(x: u64) -> u64 {
        Sequential {
            request = Operation(op(x)),
            Parallel {
                user = Operation(op(request)),
                cart = Operation(op(request)),
                prefs = Operation(op(request)),
                Sequential {
                    geo = Operation(op(request)),
                    zone = Operation(op(geo)),
                },
            },
            Parallel {
                Sequential {
                    price = Operation(op(cart)),
                    discount = Operation(op(price + prefs)),
                    tax = Operation(op(discount + zone)),
                },
                Sequential {
                    stock = Operation(op(cart)),
                    reserve = Operation(op(stock)),
                },
                risk = Operation(op(user)),
                fraud = Operation(op(user + geo)),
                Operation(op(prefs)),
            },
            total = Operation(op(tax + reserve)),
            Conditional(risk.is_ok_and(|r| *r > 0) && fraud.is_ok_and(|f| *f < 1_000_000)) {
                charge = Operation(op(total)),
                Parallel {
                    Operation(op(charge)),
                    Operation(op(charge)),
                    Operation(op(charge)),
                },
            } else {
                Operation(op(total)),
                Operation(op(request)),
            },
            Parallel {
                Sequential {
                    pick = Operation(op(reserve)),
                    pack = Operation(op(pick)),
                    label = Operation(op(pack + zone)),
                },
                Sequential {
                    invoice = Operation(op(total)),
                    email = Operation(op(invoice)),
                },
                Operation(op(user), after = [pick, invoice]),
                Parallel(max_concurrency = 2) {
                    Operation(op(prefs)),
                    Operation(op(prefs)),
                    Operation(op(prefs)),
                    Operation(op(prefs)),
                },
            },
            Conditional(label.is_ok() && email.is_ok()) {
                Parallel {
                    Operation(op(label)),
                    Operation(op(label)),
                    Operation(op(email)),
                },
            } else {
                Operation(op(request)),
            },
            Parallel {
                Sequential {
                    report = Operation(op(total)),
                    archive = Operation(op(report)),
                },
                Sequential {
                    metrics = Operation(op(x)),
                    dash = Operation(op(metrics)),
                },
                Conditional(prefs.is_ok_and(|p| *p % 2 == 1)) {
                    Operation(op(prefs)),
                } else {
                    Operation(op(prefs + 1)),
                },
                Operation(op(stock + reserve)),
                Operation(op(geo)),
            },
            Parallel {
                Operation(op(archive)),
                Operation(op(dash)),
                done = Operation(op(total + archive)),
            },
            summary = Operation(op(done + zone)),
        }
        => summary
    }
}
