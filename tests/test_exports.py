"""Chat exports read into messages (membox_local/exports.py): samples of each format written from its documentation,
told apart by content, what is skipped counted, ids stable so that a second import adds nothing."""
from __future__ import annotations

import json

import pytest

from membox_local.exports import detect, load_input
from membox_local.ingest import InputError

# ChatGPT: a tree of nodes; the person regenerated the first answer (the kept branch ends at current_node)
CHATGPT = [{
    "title": "Half marathon", "create_time": 1709546400.0, "conversation_id": "c-run", "current_node": "a2",
    "mapping": {
        "root": {"id": "root", "message": None, "parent": None, "children": ["sys"]},
        "sys": {"id": "sys", "parent": "root", "children": ["u1"],
                "message": {"author": {"role": "system"}, "content": {"content_type": "text", "parts": [""]}}},
        "u1": {"id": "u1", "parent": "sys", "children": ["a1", "a2"],
               "message": {"author": {"role": "user"}, "create_time": 1709546400.0,
                           "content": {"content_type": "multimodal_text",
                                       "parts": [{"asset_pointer": "file-1"}, "I signed up for the Lisbon half 🏃"]}}},
        "a1": {"id": "a1", "parent": "u1", "children": [],
               "message": {"author": {"role": "assistant"}, "create_time": 1709546460.0,
                           "content": {"content_type": "text", "parts": ["An answer that was regenerated."]}}},
        "a2": {"id": "a2", "parent": "u1", "children": ["t1"],
               "message": {"author": {"role": "assistant"}, "create_time": 1709546470.0,
                           "content": {"content_type": "text", "parts": ["Great! When is the race?"]}}},
        "t1": {"id": "t1", "parent": "a2", "children": [],
               "message": {"author": {"role": "tool", "name": "browser"}, "create_time": 1709546480.0,
                           "content": {"content_type": "text", "parts": ["search results"]}}},
    }}]

CLAUDE = [{"uuid": "k-1", "name": "Bakery", "chat_messages": [
    {"uuid": "m1", "sender": "human", "text": "Rosa taught me to shape baguettes.",
     "created_at": "2024-03-04T09:00:00Z", "attachments": [{"file_name": "loaf.jpg"}]},
    {"uuid": "m2", "sender": "assistant", "text": "", "content": [{"type": "text", "text": "Nice! How did it go?"}],
     "created_at": "2024-03-05T09:00:00.000000+00:00"},
    {"uuid": "m3", "sender": "human", "text": "  ", "created_at": "2024-03-05T09:01:00Z"}]}]

TELEGRAM = {"about": "Here is the data you requested.", "chats": {"list": [{
    "name": "Tom", "type": "personal_chat", "id": 4242, "messages": [
        {"id": 1, "type": "service", "date": "2024-03-04T09:00:00", "date_unixtime": "1709542800",
         "actor": "Maya", "actor_id": "user1", "action": "phone_call"},
        {"id": 2, "type": "message", "date": "2024-03-04T09:12:33", "date_unixtime": "1709543553", "from": "Maya",
         "from_id": "user1", "text": ["I signed up for the ", {"type": "bold", "text": "Lisbon half"}, "!"]},
        {"id": 3, "type": "message", "date": "2024-03-05T10:00:00", "date_unixtime": "1709632800", "from": "Tom",
         "from_id": "user2", "photo": "photos/1.jpg", "text": "Pepper 😺"},
        {"id": 4, "type": "message", "date": "2024-03-05T10:01:00", "date_unixtime": "1709632860", "from": None,
         "from_id": "user3", "text": ""}]}]}}

WHATSAPP_ANDROID = """04/03/2024, 09:12 - Messages and calls are end-to-end encrypted.
04/03/2024, 09:12 - Maya: I signed up for the Lisbon half marathon!
It is in June.
04/03/2024, 09:13 - Tom: <Media omitted>
13/03/2024, 21:05 - Tom: שלום! Pepper knocked a glass off the table 😹
"""
WHATSAPP_IOS_US = """[3/4/24, 9:12:33 AM] Maya: Hi Tom!
[3/13/24, 9:05:01 PM] Tom: image omitted
[3/13/24, 9:05:30 PM] Tom: Pepper is settling in.
"""
TRANSCRIPT = """# 4 March 2024
Maya: I signed up for the Lisbon half marathon.
Tom: No way!
That's huge.

--- 11 March 2024 ---
Maya: My knee hurts after long runs.
"""

# Slack: users.json and a folder of per-day files per channel; a thread reply, a join, a file, markup
SLACK_USERS = [{"id": "U1", "name": "maya", "profile": {"display_name": "Maya", "real_name": "Maya Lin"}},
               {"id": "U2", "name": "tom.k", "real_name": "Tom Kerr", "profile": {"display_name": ""}}]
SLACK_DAYS = {"general/2024-03-04.json": [
    {"type": "message", "user": "U2", "text": "Welcome <@U1>! See <https://example.org/run|the route>", "ts": "1709543600.000200"},
    {"type": "message", "subtype": "channel_join", "user": "U1", "text": "<@U1> has joined the channel",
     "ts": "1709543500.000100"},
    {"type": "message", "user": "U1", "text": "I signed up for the Lisbon half &amp; the 10k", "ts": "1709543700.000300",
     "files": [{"name": "route.png"}], "edited": {"user": "U1", "ts": "1709543800.000000"}}],
    "general/2024-03-05.json": [
    {"type": "message", "user": "U2", "text": "How is the knee?", "ts": "1709632800.000100",
     "thread_ts": "1709543700.000300", "parent_user_id": "U1"}],
    "random/2024-03-05.json": [{"type": "message", "user": "U1", "text": "", "ts": "1709632900.000100"}]}

DISCORD = {"guild": {"id": "g1", "name": "Runners"}, "channel": {"id": "991", "type": "GuildTextChat", "name": "lisbon"},
           "messages": [
    {"id": "1", "type": "GuildMemberJoin", "timestamp": "2024-03-04T09:00:00+00:00", "content": "",
     "author": {"id": "a1", "name": "maya", "nickname": "Maya"}},
    {"id": "2", "type": "Default", "timestamp": "2024-03-04T09:12:33.512+01:00", "timestampEdited": None,
     "content": "I signed up for the Lisbon half 🏃", "author": {"id": "a1", "name": "maya", "nickname": "Maya"},
     "attachments": [{"id": "f1", "fileName": "bib.jpg"}], "stickers": []},
    {"id": "3", "type": "Reply", "timestamp": "2024-03-05T10:00:00+00:00", "content": "Nice!",
     "author": {"id": "a2", "name": "tomk", "nickname": None}, "reference": {"messageId": "2"}}]}


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_chatgpt_keeps_the_branch_the_person_kept_and_counts_what_it_skipped(tmp_path):
    path = write(tmp_path, "conversations.json", CHATGPT)
    assert detect(path) == "chatgpt"
    read = load_input(path, user="Maya")
    assert [(m.message_id, m.speaker, m.text) for m in read.messages] == [
        ("u1", "Maya", "I signed up for the Lisbon half 🏃"), ("a2", "assistant", "Great! When is the race?")]
    assert {m.conversation_id for m in read.messages} == {"c-run"} and read.messages[0].session == "2024-03-04"
    assert read.skipped == {"regenerated or abandoned": 2, "system message": 1, "attachment": 1}
    assert "read as chatgpt: 2 messages in 1 conversation(s)" in read.summary()


def test_claude_reads_text_or_its_content_parts_and_skips_empty_messages(tmp_path):
    read = load_input(write(tmp_path, "conversations.json", CLAUDE))
    assert [(m.message_id, m.speaker, m.text, m.session) for m in read.messages] == [
        ("m1", "user", "Rosa taught me to shape baguettes.", "2024-03-04"),
        ("m2", "assistant", "Nice! How did it go?", "2024-03-05")]
    assert read.skipped == {"attachment": 1, "empty": 1}


def test_telegram_joins_text_parts_names_each_sender_and_skips_service_messages(tmp_path):
    path = write(tmp_path, "result.json", TELEGRAM)
    assert detect(path) == "telegram"
    read = load_input(path)
    assert [(m.message_id, m.speaker, m.text, m.session) for m in read.messages] == [
        ("telegram-4242-2", "Maya", "I signed up for the Lisbon half!", "2024-03-04"),
        ("telegram-4242-3", "Tom", "Pepper 😺", "2024-03-05")]
    assert read.skipped == {"service message": 1, "attachment": 1, "empty": 1}
    one_chat = load_input(write(tmp_path, "chat.json", TELEGRAM["chats"]["list"][0]), fmt="telegram")
    assert [m.message_id for m in one_chat.messages] == [m.message_id for m in read.messages]


@pytest.mark.parametrize("text, want", [
    (WHATSAPP_ANDROID, [("Maya", "I signed up for the Lisbon half marathon!\nIt is in June.", "2024-03-04"),
                        ("Tom", "שלום! Pepper knocked a glass off the table 😹", "2024-03-13")]),
    (WHATSAPP_IOS_US, [("Maya", "Hi Tom!", "2024-03-04"), ("Tom", "Pepper is settling in.", "2024-03-13")]),
], ids=["android-24h-day-first", "ios-12h-month-first"])
def test_whatsapp_lines_clocks_and_locales(tmp_path, text, want):
    path = write(tmp_path, "chat.txt", text)
    assert detect(path) == "whatsapp"
    read = load_input(path)
    assert [(m.speaker, m.text, m.session) for m in read.messages] == want
    assert read.skipped["attachment"] == 1 and {m.conversation_id for m in read.messages} == {"chat"}


def test_a_transcript_takes_its_date_lines_as_sessions_and_joins_continued_lines(tmp_path):
    read = load_input(write(tmp_path, "talk.txt", TRANSCRIPT))
    assert read.format == "transcript"
    assert [(m.speaker, m.text, m.session_date) for m in read.messages] == [
        ("Maya", "I signed up for the Lisbon half marathon.", "2024-03-04"), ("Tom", "No way!\nThat's huge.", "2024-03-04"),
        ("Maya", "My knee hurts after long runs.", "2024-03-11")]


@pytest.mark.parametrize("packed", ["folder", "zip"])
def test_slack_names_senders_reads_markup_and_keeps_a_thread_in_its_channel(tmp_path, packed):
    import zipfile

    folder = tmp_path / "export"
    for name, content in {"users.json": SLACK_USERS, "channels.json": [{"id": "C1", "name": "general"}],
                          **SLACK_DAYS}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(content), encoding="utf-8")
    path = folder
    if packed == "zip":  # as Slack hands it out: the files under a folder of the workspace's name
        path = tmp_path / "Acme Slack export.zip"
        with zipfile.ZipFile(path, "w") as zf:
            for p in folder.rglob("*.json"):
                zf.write(p, "Acme/" + p.relative_to(folder).as_posix())
    assert detect(path) == "slack"
    read = load_input(path)
    assert [(m.conversation_id, m.speaker, m.text, m.session) for m in read.messages] == [
        ("slack-general", "Tom Kerr", "Welcome @Maya! See the route", "2024-03-04"),
        ("slack-general", "Maya", "I signed up for the Lisbon half & the 10k", "2024-03-04"),
        ("slack-general", "Tom Kerr", "How is the knee?", "2024-03-05")]
    assert read.messages[0].message_id == "slack-general-1709543600.000200"
    assert read.skipped == {"system message": 1, "attachment": 1, "empty": 1}
    with pytest.raises(InputError, match="not a Slack export"):
        detect(tmp_path / "export" / "general")


def test_discord_reads_a_channel_names_by_nickname_and_skips_joins(tmp_path):
    path = write(tmp_path, "Runners - lisbon [991].json", DISCORD)
    assert detect(path) == "discord"
    read = load_input(path)
    assert [(m.message_id, m.speaker, m.text, m.session) for m in read.messages] == [
        ("discord-991-2", "Maya", "I signed up for the Lisbon half 🏃", "2024-03-04"),
        ("discord-991-3", "tomk", "Nice!", "2024-03-05")]
    assert read.skipped == {"system message": 1, "attachment": 1}
    with pytest.raises(InputError, match="message 1: no time"):
        load_input(write(tmp_path, "bad.json", {**DISCORD, "messages": [DISCORD["messages"][0],
                                                                       {**DISCORD["messages"][1], "timestamp": "soon"}]}))

def test_the_same_export_read_again_has_the_same_ids_and_a_memory_adds_nothing_twice(tmp_path, cfg):
    from membox_local.memory import Memory
    from membox_local.testing import FakeBackend, FakeEmbedder

    path = write(tmp_path, "chat.txt", WHATSAPP_ANDROID + WHATSAPP_ANDROID.splitlines(True)[-1])  # said twice
    first, again = load_input(path).messages, load_input(path).messages
    assert [m.message_id for m in first] == [m.message_id for m in again] and len({m.message_id for m in first}) == 3
    with Memory(tmp_path / "mem", cfg, backend=FakeBackend(), embedder=FakeEmbedder()) as mem:
        assert mem.store.add_messages(first) == 3 and mem.store.add_messages(again) == 0


def test_what_no_reader_takes_is_refused_in_one_line_naming_the_place(tmp_path):
    with pytest.raises(InputError, match="not a format this reads"):
        load_input(write(tmp_path, "notes.txt", "just some notes\nwith no speakers at all\nnor dates\n"))
    with pytest.raises(InputError, match=r"conversation 0: no 'mapping'"):
        load_input(write(tmp_path, "c.json", [{"title": "x"}]), fmt="chatgpt")
    looped = [{**CHATGPT[0], "mapping": {**CHATGPT[0]["mapping"], "u1": {**CHATGPT[0]["mapping"]["u1"], "parent": "a2"}}}]
    with pytest.raises(InputError, match="conversation 0: node .* loops"):
        load_input(write(tmp_path, "loop.json", looped))
    odd = [{**CHATGPT[0], "mapping": {**CHATGPT[0]["mapping"], "a2": {**CHATGPT[0]["mapping"]["a2"],
                                                                       "message": {"author": "assistant"}}}}]
    with pytest.raises(InputError, match="conversation 0 node a2: not a ChatGPT message"):
        load_input(write(tmp_path, "odd.json", odd))
    with pytest.raises(InputError, match="--format teams: not a format"):
        load_input(write(tmp_path, "t.txt", TRANSCRIPT), fmt="teams")
    with pytest.raises(InputError, match="holds no message to file"):
        load_input(write(tmp_path, "empty.txt", "04/03/2024, 09:12 - Messages are end-to-end encrypted.\n"))


def test_a_conversations_json_is_read_one_conversation_at_a_time_and_a_bad_one_named(tmp_path):
    """exports._conversations: the file read a few bytes at a time gives what json.load gives, conversation by
    conversation (an element longer than the buffer too); a malformed one is refused with its number and line."""
    from membox_local.exports import _conversations

    many = CHATGPT * 3 + [{"title": "x" * 300, "mapping": {}}] + CLAUDE
    path = write(tmp_path, "conversations.json", json.dumps(many, indent=1, ensure_ascii=False))
    for chunk in (5, 64, 1 << 20):
        assert list(_conversations(path, "ChatGPT", chunk)) == many
    numbers = write(tmp_path, "n.json", "[1234567, 89.5e3, true, null, \"x\"]")  # values the buffer's end may cut
    assert [list(_conversations(numbers, "ChatGPT", chunk)) for chunk in (2, 3, 4)] == [[1234567, 89.5e3, True, None,
                                                                                         "x"]] * 3
    bad = json.dumps(CHATGPT, indent=1)[:-2] + ",\n {\"title\": oops}\n]"
    with pytest.raises(InputError, match=r"line \d+ \(conversation 1\): not JSON"):
        list(_conversations(write(tmp_path, "bad.json", bad), "ChatGPT", 16))
    with pytest.raises(InputError, match="a ChatGPT export is a list of conversations"):
        list(_conversations(write(tmp_path, "obj.json", {"mapping": {}}), "ChatGPT"))
    from membox_local.exports import _telegram_chats  # Telegram's chats.list the same way, past other keys

    path = write(tmp_path, "result.json", {**TELEGRAM, "left_chats": {"about": "x", "list": []}})
    assert [list(_telegram_chats(path, chunk)) for chunk in (3, 1 << 20)] == [TELEGRAM["chats"]["list"]] * 2

@pytest.mark.long
def test_an_export_of_100000_messages_is_read_whole_with_an_id_each(tmp_path):
    """A generated ChatGPT export of 100 conversations of 1,000 messages (24 MB): every message read once, on the
    day it was written."""
    convs = []
    for c in range(100):
        mapping, prev = {"root": {"id": "root", "message": None, "parent": None, "children": []}}, "root"
        for i in range(1000):
            node = f"c{c}n{i}"
            mapping[node] = {"id": node, "parent": prev, "children": [], "message": {
                "author": {"role": "user" if i % 2 == 0 else "assistant"}, "create_time": 1709546400 + c * 86400 + i,
                "content": {"content_type": "text", "parts": [f"message {i} of conversation {c}"]}}}
            mapping[prev]["children"].append(node)
            prev = node
        convs.append({"conversation_id": f"conv{c}", "current_node": prev, "mapping": mapping})
    read = load_input(write(tmp_path, "conversations.json", convs))
    assert len(read.messages) == 100_000 and len({m.message_id for m in read.messages}) == 100_000
    assert len({m.session for m in read.messages}) == 100 and read.skipped == {}
