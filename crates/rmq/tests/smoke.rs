mod common;
use common::*;
use rmq::{Message, TopicKind};

#[tokio::test]
async fn send_take_ack_round_trip() {
    let (_server, _client, topic) = setup(TopicKind::Priority, 4).await;
    let sent = topic.send(Message::new("hello").priority(3)).await.unwrap();
    assert!(!sent.merged);
    let (mut s, _stop) = stream(&topic, 4);
    let d = next(&mut s, 5).await.expect("a delivery");
    assert_eq!(d.payload, b"hello");
    assert_eq!(d.priority, Some(3));
    assert_eq!(d.attempt, 1);
    d.ack().await.unwrap();
    let st = topic.stats().await.unwrap();
    assert_eq!(st.total.pending + st.total.in_flight, 0);
    assert_eq!(st.total.acked, 1);
}
