-- Neovim's own LSP client against `rulec lsp` (compiler/tests/lsp_nvim.rs,
-- docs/editors.md#neovim): open RULE_FILE, wait for its diagnostics, apply
-- the quick fix, wait for them to go, and write what happened to OUT.
-- Uses the API of Neovim 0.7 (start_client, buf_attach_client), which
-- later versions keep.
local rulec, file, out = os.getenv("RULEC"), os.getenv("RULE_FILE"), os.getenv("OUT")
local lines = {}
local function say(line) table.insert(lines, line) end
local function finish()
  vim.fn.writefile(lines, out)
  vim.cmd("qall!")
end

vim.cmd("edit " .. vim.fn.fnameescape(file))
local client = vim.lsp.start_client({
  name = "rulec",
  cmd = { rulec, "lsp" },
  root_dir = vim.fn.fnamemodify(file, ":h"),
})
if not client then
  say("error: the client did not start")
  return finish()
end
vim.lsp.buf_attach_client(0, client)

if not vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 50) then
  say("error: no diagnostics within 30 s")
  return finish()
end
for _, d in ipairs(vim.diagnostic.get(0)) do
  say(string.format("diagnostic %d:%d %s %s", d.lnum + 1, d.col + 1, d.code or "?",
    vim.split(d.message, "\n")[1]))
end

local first = vim.diagnostic.get(0)[1]
local params = {
  textDocument = vim.lsp.util.make_text_document_params(0),
  range = {
    start = { line = first.lnum, character = first.col },
    ["end"] = { line = first.end_lnum, character = first.end_col },
  },
  context = { diagnostics = { first.user_data.lsp } },
}
local answers = vim.lsp.buf_request_sync(0, "textDocument/codeAction", params, 10000) or {}
for _, answer in pairs(answers) do
  for _, action in ipairs(answer.result or {}) do
    say("action " .. action.title)
    vim.lsp.util.apply_workspace_edit(action.edit, "utf-16")
  end
end
say("line " .. vim.fn.getline(3))

if vim.wait(30000, function() return #vim.diagnostic.get(0) == 0 end, 50) then
  say("diagnostics after the fix: 0")
else
  say("error: diagnostics still there 30 s after the fix")
end
vim.lsp.stop_client(client)
finish()
