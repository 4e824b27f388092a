use super::*;
use crate::store::MessageStatus;
use crate::sync::wire::TaskError;

fn status(state: MessageState, reason: Option<&str>) -> Option<MessageStatus> {
    Some(MessageStatus {
        state,
        queue: "to_node".into(),
        peer: "node:a".into(),
        attempts: 0,
        next_attempt_at_ms: 0,
        reason: reason.map(str::to_string),
    })
}

fn shown(view: Option<MessageView>) -> String {
    call_box("m-1", &CallState::of(view)).into_string()
}

#[test]
fn a_calls_box_says_waiting_its_result_or_its_error_code() {
    let waiting = shown(Some(MessageView {
        status: status(MessageState::Delivered, None),
        result: None,
    }));
    assert!(waiting.contains(r#"data-state="waiting""#), "{waiting}");
    assert!(shown(None).contains(r#"data-state="waiting""#));
    let ok = shown(Some(MessageView {
        status: None,
        result: Some(TaskResult {
            error: None,
            evidence: serde_json::Value::Null,
            job_id: "j".into(),
            ok: true,
            request_id: None,
            result: Some(serde_json::json!({"reading": "<7>"})),
        }),
    }));
    assert!(ok.contains(r#"data-state="ok""#), "{ok}");
    assert!(
        ok.contains("&quot;reading&quot;: &quot;&lt;7&gt;&quot;"),
        "{ok}"
    );
    let failed = shown(Some(MessageView {
        status: None,
        result: Some(TaskResult {
            error: Some(TaskError {
                code: "unknown_tool".into(),
                message: "no such tool".into(),
            }),
            evidence: serde_json::Value::Null,
            job_id: "j".into(),
            ok: false,
            request_id: None,
            result: None,
        }),
    }));
    assert!(failed.contains(r#"data-code="unknown_tool""#), "{failed}");
    let expired = shown(Some(MessageView {
        status: status(MessageState::Expired, Some("timeout_in_queue")),
        result: None,
    }));
    assert!(
        expired.contains(r#"data-code="timeout_in_queue""#),
        "{expired}"
    );
    assert!(expired.contains("expired"), "{expired}");
}

#[test]
fn a_form_sent_back_keeps_only_its_own_fields() {
    let r = Refused {
        form: FormKind::ToolCall,
        error: "no".into(),
        values: vec![("tool_args", "{".into())],
    };
    assert_eq!(r.value(FormKind::ToolCall, "tool_args"), "{");
    assert_eq!(r.value(FormKind::Command, "tool_args"), "");
    assert_eq!(r.value(FormKind::ToolCall, "tool_name"), "");
    assert!(pretty(Some(&serde_json::json!("x".repeat(5000)))).ends_with('…'));
}
