-- Neovim's own LSP client against `rulec lsp` (compiler/tests/lsp_nvim.rs,
-- docs/editors.md#neovim), set up by the snippet of docs/editors.md
-- (SNIPPET, `rulec` on PATH): open RULE_FILE, wait for its diagnostics,
-- apply the quick fix, wait for them to go; open NEW_FILE (new, in the
-- same rules folder) and OTHER_FILE (a Cargo.toml outside any rules
-- folder) and say how many clients each has; write what happened to OUT.
-- Uses the API of Neovim 0.7, which later versions keep.
local file, out = os.getenv("RULE_FILE"), os.getenv("OUT")
local lines = {}
local function say(line) table.insert(lines, line) end
local function finish()
  vim.fn.writefile(lines, out)
  vim.cmd("qall!")
end

-- A user's Neovim detects filetypes; `--noplugin` (no plugins of the
-- machine's in the test) leaves that off.
vim.cmd("filetype on")
local loaded, error = pcall(dofile, os.getenv("SNIPPET"))
if not loaded then
  say("error: the snippet failed: " .. tostring(error))
  return finish()
end

-- What follows is an editing session: after start-up (and its filetype
-- detection), as a user's.
local function session()
  local opened, why = pcall(vim.cmd, "edit " .. vim.fn.fnameescape(file))
  if not opened then
    say("error: opening " .. file .. ": " .. tostring(why))
    return finish()
  end
  if not vim.wait(10000, function() return #vim.lsp.buf_get_clients(0) > 0 end, 50) then
    say("error: no client attached to " .. file .. " (filetype " .. vim.bo.filetype .. "): "
      .. vim.fn.execute("messages"):gsub("\n", " "))
    return finish()
  end

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

  -- The FileType autocommand has run once `edit` returns.
  for _, name in ipairs({ "NEW_FILE", "OTHER_FILE" }) do
    vim.cmd("edit " .. vim.fn.fnameescape(os.getenv(name)))
    say(string.format("%s: filetype %s, %d client(s)", vim.fn.expand("%:t"), vim.bo.filetype,
      #vim.lsp.buf_get_clients(0)))
  end

  for _, client in pairs(vim.lsp.get_active_clients()) do
    client.stop()
  end
  finish()
end
-- `nested`: the `edit`s in it fire their own autocommands (FileType).
vim.api.nvim_create_autocmd("VimEnter", { callback = session, once = true, nested = true })
