"""The CSS of `membox view`'s page (view.py): inline in the page, which fetches nothing (no font, no image)."""

STYLE = """
:root { --ink: #1d2330; --muted: #667085; --line: #d9dee7; --paper: #ffffff; --band: #f7f8fb; --accent: #3559e0; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: #eef1f6; }
header.top { padding: 12px 20px; background: var(--paper); border-bottom: 1px solid var(--line);
             display: flex; gap: 20px; align-items: baseline; flex-wrap: wrap; }
header.top h1 { margin: 0; font-size: 18px; }
header.top .legend { margin: 0; color: var(--muted); }
.picker select { font: inherit; padding: 2px 4px; }
main { padding: 12px 20px 40px; }
.conv-head { font-size: 16px; margin: 4px 0 10px; }
.conv-head .counts, .sess, .size, .event-date, .span, .hint, .note, .meta { color: var(--muted); font-weight: normal; }
.conv-head .counts { font-size: 13px; margin-left: 8px; }
.layout { display: grid; grid-template-columns: minmax(0, 1fr) 380px; gap: 16px; align-items: start; }
.timeline { position: relative; }
svg.links { position: absolute; left: 0; top: 0; pointer-events: none; overflow: visible; z-index: 2; }
.session { display: grid; grid-template-columns: 150px minmax(0, 1fr); border-top: 2px solid var(--line);
           padding: 10px 0 4px; }
.session:first-of-type { border-top: 0; }
.when { padding-right: 10px; font-size: 12px; }
.when .date { font-weight: 600; font-size: 13px; position: sticky; top: 4px; }
.bands { padding-left: 22px; display: flex; flex-direction: column; gap: 8px; }
.box { background: var(--paper); border: 1px solid var(--line); border-left: 5px solid #9aa7bd; border-radius: 6px;
       padding: 7px 10px; cursor: pointer; transition: opacity .15s; }
.box:hover { border-color: #aab4c6; }
.box:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
.box.selected { border-left-color: var(--accent); background: #f3f6ff; }
.box.status-failed { border-left-color: #d92d20; }
.box.status-open, .box.status-sealed { border-left-style: dashed; }
.box-head { display: flex; gap: 8px; align-items: baseline; }
.box-id { color: var(--muted); font-size: 12px; font-variant-numeric: tabular-nums; }
.topic { margin: 0; font-size: 14px; flex: 1; }
.status { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: #b42318; }
.none { color: var(--muted); font-style: italic; font-weight: normal; }
.keywords { list-style: none; margin: 4px 0 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px; }
.keywords li { background: #e8ecf4; border-radius: 10px; padding: 0 8px; font-size: 12px; }
.events { margin: 5px 0 0; padding-left: 4px; list-style: none; }
.events li { padding: 1px 4px; border-left: 3px solid transparent; }
.event-date { font-size: 12px; }
.weak { font-size: 11px; color: #b54708; }
.source { font-size: 11px; color: var(--accent); background: #eef2ff; border-radius: 3px; padding: 0 4px;
          margin-left: 4px; cursor: pointer; } .source.missing { color: var(--muted); cursor: default; }
ol.messages li.cited { background: #fff4c2; }
.error { margin: 4px 0 0; color: #b42318; font-size: 12px; white-space: pre-wrap; }
.note { margin: 4px 0 0; color: var(--muted); font-size: 12px; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; background: var(--c);
       margin-right: 5px; vertical-align: baseline; cursor: pointer; }
.c0 { --c: #e6194b; } .c1 { --c: #3cb44b; } .c2 { --c: #4363d8; } .c3 { --c: #f58231; }
.c4 { --c: #911eb4; } .c5 { --c: #42a5b3; } .c6 { --c: #c8a000; } .c7 { --c: #f032e6; }
.tracing .box { opacity: .35; }
.tracing .box.in-trace { opacity: 1; box-shadow: 0 0 0 2px var(--trace); }
.tracing .events li.in-trace { border-left-color: var(--trace); font-weight: 600; }
.side { position: sticky; top: 8px; max-height: calc(100vh - 16px); overflow: auto; display: flex;
        flex-direction: column; gap: 12px; }
.side > section { background: var(--paper); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.side h3 { margin: 0 0 4px; font-size: 14px; }
.hint { margin: 0 0 6px; font-size: 12px; }
.traces ol { list-style: none; margin: 0; padding: 0; }
.trace { display: grid; grid-template-columns: 14px 1fr; column-gap: 6px; padding: 5px 4px; border-radius: 4px;
         cursor: pointer; border: 1px solid transparent; }
.trace:hover, .trace.active { background: #f1f4fa; border-color: var(--c); }
.trace .swatch { width: 12px; height: 12px; border-radius: 3px; background: var(--c); margin-top: 4px; }
.trace .summary { font-weight: 600; }
.trace .span, .trace .joins { grid-column: 2; font-size: 12px; }
.join { display: inline-block; background: #e8ecf4; border-radius: 3px; padding: 0 4px; margin: 1px 2px 0 0; }
.join:hover { background: #d5dcea; }
.tracing .box.selected { opacity: .75; }
.detail-body h4 { margin: 2px 0; font-size: 14px; }
.meta { font-size: 12px; margin: 0 0 6px; }
ol.messages { margin: 0; padding-left: 0; list-style: none; }
ol.messages li { padding: 4px 0; border-top: 1px solid #eef0f4; white-space: pre-wrap; overflow-wrap: anywhere; }
.speaker { font-weight: 600; margin-right: 6px; }
.mid { color: var(--muted); font-size: 11px; margin-left: 6px; }
.note { font-size: 13px; }
@media (max-width: 900px) { .layout { grid-template-columns: 1fr; } .side { position: static; max-height: none; } }
"""
