// The `main` of tests/ui-pass/dsl-reference.rs: runs the workflows of docs/dsl.md.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let ctx = AppCtx;
    demo(&ctx).await.expect("demo");
    assert_eq!(OrderTotal::run(&ctx, 3).await.expect("total"), 4200);
    Notify::run(&ctx, 1).await.expect("notify");
    NotifyAll::run(&ctx).await.expect("notifyall");
    MaybeNotify::run(&ctx, 1).await.expect("maybe");
    Reads::run(&ctx, 1).await.expect("reads");
    Pattern::run().await.expect("pattern");
    assert_eq!(Calls::run(&Client).await.expect("calls"), 14);
    let o = Pay::runner().execute((&ctx, 5)).await;
    println!("{:?}", o.report.nodes());
    assert_eq!(o.report.nodes()[2].operation, Some("charge card"));
    Screen::run(&ctx, 1).await.expect("screen");
    let (id, r) = Receipted::run(&ctx, 9).await.expect("receipted");
    assert_eq!(id, 9); assert!(r.is_some());
    println!("{}", Checkout::GRAPH);
    println!("{}", Pattern::GRAPH);
    println!("{}", Calls::GRAPH);
    Settle::run(&ctx, 4).await.expect("settle");
    more().await;
    generic().await;
    println!("all ok");
}
#[allow(dead_code)]
async fn more() {
    let ctx = AppCtx;
    assert_eq!(Resilient::run(&ctx, 1).await.expect("resilient"), 0.1);
    NotifyTwice::run(&ctx).await.expect("twice");
    assert_eq!(Reserve::run(&ctx, 7, false).await.expect("reserve"), Some(7));
    assert_eq!(Reserve::run(&ctx, 7, true).await.expect("cancelled"), None);
    assert_eq!(Quote::run(&ctx, 1).await.expect("quote"), 4200);
    assert_eq!(ChargeAll::run(&ctx, &[1, 2]).await.expect("charge all"), [4200, 4200]);
    assert!(QuickQuote::run(&ctx, &[1, 2]).await.expect("quick quote") <= 2);
    assert_eq!(AwaitShipping::run(&ctx, 1).await.expect("shipping"), 3);
    assert_eq!(FirstLarge::run(&ctx).await.expect("first large"), 0);
    assert_eq!(CheckoutAndNotify::run(&ctx, 2).await.expect("checkout"), Some(4200));
    println!("more ok");
}
#[allow(dead_code)]
async fn generic() {
    let ctx = AppCtx;
    let orders = vec![Order { id: 1, total: 5 }, Order { id: 2, total: 9 }];
    let top = Largest::run(&orders, &ctx).await.expect("largest");
    assert!(std::ptr::eq(top, &orders[1]));
    assert_eq!(First::run(&[4, 5]).await.expect("first"), 4);
    let outcome = First::runner().execute(&["a", "b"]).await;
    assert_eq!(outcome.result.expect("first"), "a");
    assert_eq!(First::<String>::GRAPH.name(), "First");
    println!("generic ok");
}
