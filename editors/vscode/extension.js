// Starts `tfspec lsp` for .tfs files; everything else (diagnostics, hover, completion, ...) is the server's.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace.getConfiguration("tfspec").get("command");
  client = new LanguageClient(
    "tfspec", "tfspec",
    { command, args },
    { documentSelector: [{ scheme: "file", language: "tfspec" }, { scheme: "untitled", language: "tfspec" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
