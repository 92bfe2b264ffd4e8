// A real OpenID Connect provider for gpupool's tests: oauth2-mock-server (discovery document,
// JWKS, token endpoint) with company-style users. Tokens come from its own token endpoint:
//   password grant            username/password of USERS_FILE; the access token carries
//                             preferred_username and the user's groups (read from USERS_FILE
//                             at every request, so a test can change a user's groups)
//   client_credentials grant  a service token; `aud` may be chosen by the caller
// Every access token gets `aud` = GPUPOOL_OIDC_AUDIENCE unless the request names another.
// Started by scripts/oidc/up.sh; not meant for production.
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { OAuth2Server } from "oauth2-mock-server";

const port = Number(process.env.GPUPOOL_OIDC_PORT ?? 18443);
const audience = process.env.GPUPOOL_OIDC_AUDIENCE ?? "gpupool";
const usersFile = process.env.GPUPOOL_OIDC_USERS;

function users() {
  try {
    return JSON.parse(readFileSync(usersFile, "utf8"));
  } catch {
    return {};
  }
}

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");

server.service.on("beforeTokenSigning", (token, req) => {
  const body = req.body ?? {};
  if (body.grant_type === "password") {
    const user = users()[body.username];
    token.payload.preferred_username = body.username;
    token.payload.groups = user?.groups ?? [];
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

// The issuer URL must be exactly what tokens carry and gpupool is configured with.
server.issuer.url = `http://127.0.0.1:${port}`;
await server.start(port, "127.0.0.1");
console.log(`oidc provider: issuer ${server.issuer.url}`);
