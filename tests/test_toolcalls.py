from tracegym.toolcalls import parse_tool_calls, render_tool_call


def test_round_trip_of_canonical_call():
    text = render_tool_call("get_user", {"user_id": "u_1", "n": 3})
    turn = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in turn.calls] == [("get_user", {"user_id": "u_1", "n": 3})]
    assert not turn.errors and not turn.is_final_answer


def test_prose_and_several_calls():
    text = "Let me check.\n" + render_tool_call("a", {}) + "\n" + render_tool_call("b", {"x": 1})
    turn = parse_tool_calls(text)
    assert turn.text == "Let me check."
    assert [c.name for c in turn.calls] == ["a", "b"]
    assert len({c.id for c in turn.calls}) == 2


def test_tolerates_chatter_string_arguments_and_missing_close_tag():
    turn = parse_tool_calls('<tool_call>sure: {"name": "a", "arguments": "{\\"x\\": 2}"} ok</tool_call>')
    assert turn.calls[0].arguments == {"x": 2}
    turn = parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}')
    assert turn.calls[0].name == "a"


def test_malformed_calls_become_errors_not_exceptions():
    for text, reason in [
        ("<tool_call>{not json</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "needs"),
        ('<tool_call>["a"]</tool_call>', "needs"),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "JSON object"),
    ]:
        turn = parse_tool_calls(text)
        assert not turn.calls and len(turn.errors) == 1 and reason in turn.errors[0].reason
        assert not turn.is_final_answer


def test_plain_text_is_a_final_answer():
    turn = parse_tool_calls("The answer is 42.")
    assert turn.is_final_answer and turn.text == "The answer is 42."


def test_tool_signature_is_one_line_with_types_enums_and_optional_arguments():
    from tracegym.toolcalls import tool_signature, tools_system_prompt

    schema = {
        "name": "book",
        "description": "Book a room.",
        "parameters": {
            "type": "object",
            "properties": {
                "room": {"type": "string", "enum": ["standard", "suite"], "description": "the room"},
                "nights": {"type": "integer"},
                "note": {"type": "string"},
            },
            "required": ["room", "nights"],
        },
    }
    assert tool_signature(schema) == "book(room: standard|suite, nights: integer, note?: string) - Book a room."
    compact, full = tools_system_prompt("Rules.", [schema], compact=True), tools_system_prompt("Rules.", [schema])
    assert tool_signature(schema) in compact and "<tools>" not in compact and '"enum"' in full and "<tools>" in full
