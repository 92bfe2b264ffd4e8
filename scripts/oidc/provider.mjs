// A real OpenID Connect provider for gpupool's tests: oauth2-mock-server (discovery document,
// JWKS, token endpoint) with company-style users. Tokens come from its own token endpoint:
//   password grant            username/password of USERS_FILE; the access token carries
//                             preferred_username and the user's groups (read from USERS_FILE
//                             at every request, so a test can change a user's groups)
//   client_credentials grant  a service token; `aud` may be chosen by the caller
//   device_code grant         the Device Authorization Grant (RFC 8628), served here:
//                             POST /device_authorization starts it, the user approves or denies
//                             on the verification page /device with their USERS_FILE password,
//                             the client polls the token endpoint; it gets a refresh token
//   refresh_token grant       for a refresh token of the device grant: a new access token with
//                             the user's current groups, and a new refresh token (rotation)
//   authorization_code grant  with PKCE (S256 only, RFC 7636): GET /authorize shows a sign-in
//                             form, POST /authorize checks USERS_FILE and redirects back with
//                             a one-time code; the token endpoint checks the code's client,
//                             redirect_uri and code_verifier before it issues the user's token
// Every access token gets `aud` = GPUPOOL_OIDC_AUDIENCE unless the request names another.
// Device-flow timings are per client, from CLIENTS_FILE (re-read per request):
//   {"<client_id>": {"interval": <s>, "expires_in": <s>}}; others get 5 s and 600 s.
// Started by scripts/oidc/up.sh; not meant for production.
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { OAuth2Server } from "oauth2-mock-server";

const port = Number(process.env.GPUPOOL_OIDC_PORT ?? 18443);
const audience = process.env.GPUPOOL_OIDC_AUDIENCE ?? "gpupool";
const usersFile = process.env.GPUPOOL_OIDC_USERS;
const clientsFile = process.env.GPUPOOL_OIDC_CLIENTS;
const issuer = `http://127.0.0.1:${port}`;
const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";
const TOKEN_TTL_S = 3600;
// The user-code alphabet of RFC 8628 §6.1: no vowels, no look-alike characters.
const USER_CODE_CHARS = "BCDFGHJKLMNPQRSTVWXZ";

function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return {};
  }
}

const users = () => readJson(usersFile);

function clientTimings(clientId) {
  const c = readJson(clientsFile)[clientId] ?? {};
  return { interval: Number(c.interval ?? 5), expiresIn: Number(c.expires_in ?? 600) };
}

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");
// The issuer URL must be exactly what tokens carry and gpupool is configured with.
server.issuer.url = issuer;

server.service.on("beforeTokenSigning", (token, req) => {
  const body = req.body ?? {};
  if (body.grant_type === "password") {
    const user = users()[body.username];
    token.payload.preferred_username = body.username;
    token.payload.groups = user?.groups ?? [];
    Object.assign(token.payload, user?.claims ?? {});
  }
  token.payload.aud = body.aud ?? audience;
  token.payload.jti = randomUUID();
});

server.service.on("beforeResponse", (response, req) => {
  const body = req.body ?? {};
  if (body.grant_type !== "password") return;
  const user = users()[body.username];
  if (user === undefined || user.password !== body.password) {
    response.statusCode = 400;
    response.body = { error: "invalid_grant", error_description: "unknown user or bad password" };
  }
});

// --- the authorization code grant with PKCE -----------------------------------------------
const codes = new Map(); // code -> {user, clientId, redirectUri, challenge, scope, expiresAt}
const CODE_TTL_MS = 60_000;
const AUTHORIZE_FIELDS = ["client_id", "redirect_uri", "state", "scope", "code_challenge", "code_challenge_method"];

function authorizeForm(params, error) {
  const hidden = AUTHORIZE_FIELDS.map(
    (name) => `<input type="hidden" name="${name}" value="${escapeHtml(params[name] ?? "")}">`,
  ).join("");
  return page(
    "Sign in",
    `${error ? `<p id="error">${escapeHtml(error)}</p>` : ""}<form method="post" action="/authorize">${hidden}
<label>User <input name="username" id="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button id="approve" name="action" value="approve">Sign in</button>
</form>`,
  );
}

function authorizeRequestError(params) {
  if (params.response_type !== undefined && params.response_type !== "code") return "response_type must be code";
  if (!params.client_id) return "client_id is required";
  if (!params.redirect_uri) return "redirect_uri is required";
  if (!params.code_challenge) return "code_challenge is required (PKCE)";
  if (params.code_challenge_method !== "S256") return "code_challenge_method must be S256";
  return null;
}

function authorize(res, params) {
  const html = "text/html; charset=utf-8";
  const problem = authorizeRequestError(params);
  if (problem) return send(res, 400, page("Bad request", `<p>${escapeHtml(problem)}</p>`), html);
  send(res, 200, authorizeForm(params), html);
}

function authorizeAnswer(res, form) {
  const html = "text/html; charset=utf-8";
  const problem = authorizeRequestError(form);
  if (problem) return send(res, 400, page("Bad request", `<p>${escapeHtml(problem)}</p>`), html);
  const user = users()[form.username];
  if (user === undefined || user.password !== form.password) {
    return send(res, 401, authorizeForm(form, "Unknown user or bad password."), html);
  }
  const code = randomBytes(32).toString("base64url");
  codes.set(code, {
    user: form.username,
    clientId: form.client_id,
    redirectUri: form.redirect_uri,
    challenge: form.code_challenge,
    scope: form.scope ?? "",
    expiresAt: Date.now() + CODE_TTL_MS,
  });
  const target = new URL(form.redirect_uri);
  target.searchParams.set("code", code);
  if (form.state) target.searchParams.set("state", form.state);
  res.writeHead(303, { Location: target.href, "Cache-Control": "no-store" });
  res.end();
}

// The token endpoint's answer to a code (RFC 6749 §4.1.3 with RFC 7636 §4.6).
async function redeemCode(req, res, form) {
  const grant = codes.get(form.code);
  codes.delete(form.code); // one use, whatever the outcome
  if (!grant || Date.now() >= grant.expiresAt) return oauthError(res, "invalid_grant", "unknown or expired code");
  if (grant.clientId !== form.client_id || grant.redirectUri !== form.redirect_uri) {
    return oauthError(res, "invalid_grant", "the code was issued to another client or redirect_uri");
  }
  const verifier = String(form.code_verifier ?? "");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  if (verifier.length < 43 || challenge !== grant.challenge) {
    return oauthError(res, "invalid_grant", "code_verifier does not match the code_challenge");
  }
  await issueUserTokens(req, res, grant.user, grant.clientId, grant.scope);
}

// --- the device authorization grant -------------------------------------------------------
const devices = new Map(); // device_code -> {userCode, clientId, scope, expiresAt, interval, lastPoll, status, user}
const userCodes = new Map(); // user_code (normalised) -> device_code
const refreshTokens = new Map(); // refresh token -> {user, clientId, scope}

const normalise = (code) => String(code ?? "").toUpperCase().replace(/[^A-Z]/g, "");

function newUserCode() {
  const bytes = randomBytes(8);
  const chars = [...bytes].map((b) => USER_CODE_CHARS[b % USER_CODE_CHARS.length]).join("");
  return `${chars.slice(0, 4)}-${chars.slice(4)}`;
}

function send(res, status, body, type = "application/json") {
  const text = type === "application/json" ? JSON.stringify(body) : body;
  res.writeHead(status, { "Content-Type": type, "Cache-Control": "no-store" });
  res.end(text);
}

const oauthError = (res, error, description) =>
  send(res, 400, { error, error_description: description });

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString("utf8")));
}

function deviceAuthorization(res, form) {
  if (!form.client_id) return oauthError(res, "invalid_client", "client_id is required");
  const { interval, expiresIn } = clientTimings(form.client_id);
  const deviceCode = randomBytes(32).toString("base64url");
  const userCode = newUserCode();
  devices.set(deviceCode, {
    userCode,
    clientId: form.client_id,
    scope: form.scope ?? "",
    expiresAt: Date.now() + expiresIn * 1000,
    interval,
    lastPoll: 0,
    status: "pending",
    user: null,
  });
  userCodes.set(normalise(userCode), deviceCode);
  send(res, 200, {
    device_code: deviceCode,
    user_code: userCode,
    verification_uri: `${issuer}/device`,
    verification_uri_complete: `${issuer}/device?user_code=${encodeURIComponent(userCode)}`,
    expires_in: expiresIn,
    interval,
  });
}

function page(title, body) {
  // An empty icon: a browser asks for /favicon.ico otherwise, and a 404 there is a console error.
  return `<!doctype html><html><head><title>${title}</title><link rel="icon" href="data:,"></head><body><h1>${title}</h1>${body}</body></html>`;
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function verificationForm(userCode) {
  return page(
    "Sign in to a device",
    `<form method="post" action="/device">
<label>Code <input name="user_code" value="${escapeHtml(userCode ?? "")}"></label>
<label>User <input name="username"></label>
<label>Password <input name="password" type="password"></label>
<button name="action" value="approve">Approve</button>
<button name="action" value="deny">Deny</button>
</form>`,
  );
}

// The user's answer on the verification page: sign in, then approve or deny the device.
function verify(res, form) {
  const deviceCode = userCodes.get(normalise(form.user_code));
  const device = deviceCode && devices.get(deviceCode);
  const html = "text/html; charset=utf-8";
  if (!device || device.status !== "pending") {
    return send(res, 400, page("Unknown code", "<p>That code is not waiting for sign-in.</p>"), html);
  }
  if (Date.now() >= device.expiresAt) {
    return send(res, 400, page("Code expired", "<p>Start the sign-in again.</p>"), html);
  }
  const user = users()[form.username];
  if (user === undefined || user.password !== form.password) {
    return send(res, 401, page("Sign-in failed", "<p>Unknown user or bad password.</p>"), html);
  }
  if (form.action === "approve") {
    device.status = "approved";
    device.user = form.username;
    return send(res, 200, page("Device approved", "<p>Return to your terminal.</p>"), html);
  }
  device.status = "denied";
  send(res, 200, page("Device denied", "<p>The device was not signed in.</p>"), html);
}

async function issueUserTokens(req, res, user, clientId, scope) {
  const groups = users()[user]?.groups ?? [];
  const accessToken = await server.service.buildToken(req, TOKEN_TTL_S, (_header, payload) => {
    Object.assign(payload, users()[user]?.claims ?? {});
    Object.assign(payload, { sub: user, preferred_username: user, groups, scope, client_id: clientId });
  });
  const refreshToken = randomBytes(32).toString("base64url");
  refreshTokens.set(refreshToken, { user, clientId, scope });
  send(res, 200, {
    access_token: accessToken,
    token_type: "Bearer",
    expires_in: TOKEN_TTL_S,
    refresh_token: refreshToken,
    scope,
  });
}

// The token endpoint's answer to a device-code poll (RFC 8628 §3.5).
async function pollDevice(req, res, form) {
  const device = devices.get(form.device_code);
  if (!device || device.clientId !== form.client_id) {
    return oauthError(res, "invalid_grant", "unknown device_code for this client");
  }
  const now = Date.now();
  if (now >= device.expiresAt) {
    devices.delete(form.device_code);
    return oauthError(res, "expired_token", "the device code has expired");
  }
  if (device.status === "denied") {
    devices.delete(form.device_code);
    return oauthError(res, "access_denied", "the user denied the request");
  }
  if (device.status === "pending") {
    // Polling faster than the interval (a small allowance for timer jitter) slows the client.
    const early = now - device.lastPoll < device.interval * 1000 - 50;
    device.lastPoll = now;
    if (early) {
      device.interval += 5;
      return oauthError(res, "slow_down", `poll at most every ${device.interval} s`);
    }
    return oauthError(res, "authorization_pending", "the user has not answered yet");
  }
  devices.delete(form.device_code);
  userCodes.delete(normalise(device.userCode));
  await issueUserTokens(req, res, device.user, device.clientId, device.scope);
}

async function handle(req, res) {
  const url = new URL(req.url, issuer);
  if (req.method === "GET" && url.pathname === "/.well-known/openid-configuration") {
    // The mock's document, with the device endpoint and grant added.
    return server.service.openidConfigurationHandler(req, {
      json: (doc) =>
        send(res, 200, {
          ...doc,
          device_authorization_endpoint: `${issuer}/device_authorization`,
          grant_types_supported: [...doc.grant_types_supported, DEVICE_GRANT, "refresh_token"],
        }),
    });
  }
  if (req.method === "POST" && url.pathname === "/device_authorization") {
    return deviceAuthorization(res, await readForm(req));
  }
  if (req.method === "GET" && url.pathname === "/device") {
    return send(res, 200, verificationForm(url.searchParams.get("user_code")), "text/html; charset=utf-8");
  }
  if (req.method === "POST" && url.pathname === "/device") {
    return verify(res, await readForm(req));
  }
  if (req.method === "GET" && url.pathname === "/authorize") {
    return authorize(res, Object.fromEntries(url.searchParams));
  }
  if (req.method === "POST" && url.pathname === "/authorize") {
    return authorizeAnswer(res, await readForm(req));
  }
  if (req.method === "POST" && url.pathname === "/token") {
    const form = await readForm(req);
    // A body read here is final: the mock's parsers see the request as finished and keep it.
    req.body = form;
    if (form.grant_type === DEVICE_GRANT) return pollDevice(req, res, form);
    if (form.grant_type === "authorization_code") return redeemCode(req, res, form);
    if (form.grant_type === "refresh_token" && refreshTokens.has(form.refresh_token)) {
      const grant = refreshTokens.get(form.refresh_token);
      refreshTokens.delete(form.refresh_token);
      return issueUserTokens(req, res, grant.user, grant.clientId, grant.scope);
    }
  }
  server.service.requestHandler(req, res);
}

createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(error);
    if (!res.headersSent) send(res, 500, { error: "server_error" });
  });
}).listen(port, "127.0.0.1", () => console.log(`oidc provider: issuer ${issuer}`));
