// The identity provider of the OAuth tests (tests/e2e/http/oauth.rs): oauth2-mock-server on
// 127.0.0.1, issuing RS256-signed JWTs with OpenID discovery and a JWKS, plus what a real
// provider does and the mock leaves out:
//   - dynamic client registration (RFC 7591) at /register, advertised in discovery;
//   - the scope asked for at /authorize is the scope of the token the code is exchanged for;
//   - the RFC 8707 `resource` of the token request becomes the token's `aud`;
//   - the subject of authorization-code tokens is `--subject` (default alice).
// And two routes for the tests only:
//   - POST /test/mint {header, claims, expiresIn}: a token signed by the current key, with the
//     claims given (null removes a claim);
//   - POST /test/rotate: a new key (new kid) signs from now on, and the old one leaves the JWKS.
//
// Usage: node launch.mjs PORT [SUBJECT]. Prints `ready ISSUER` on stdout once serving; stops
// when its stdin closes (the test process ended), so no provider outlives its test.

import { OAuth2Server } from 'oauth2-mock-server';
import { randomUUID } from 'node:crypto';

const port = Number(process.argv[2] ?? 0);
const subject = process.argv[3] ?? 'alice';

const server = new OAuth2Server();
const store = server.issuer.keys;
// The signing key is the current one (the mock would take turns among all), and a retired key
// leaves the JWKS: a rotation as a provider does it.
let current = (await store.generate('RS256')).kid;
const retired = new Set();
const published = store.toJSON.bind(store);
const pick = store.get.bind(store);
store.toJSON = (includePrivate) => published(includePrivate).filter((key) => !retired.has(key.kid));
store.get = (kid) => pick(kid ?? current);

// code -> {scope, resource} asked for at /authorize.
const asked = new Map();
server.service.on('beforeAuthorizeRedirect', (redirect, req) => {
  const query = new URL(req.url, 'http://x').searchParams;
  const code = redirect.url.searchParams.get('code');
  if (code) {
    asked.set(code, { scope: query.get('scope'), resource: query.get('resource') });
  }
});

server.service.on('beforeTokenSigning', (token, req) => {
  const body = req.body ?? {};
  if (body.grant_type === 'authorization_code') {
    const authorized = asked.get(body.code) ?? {};
    token.payload.sub = subject;
    if (authorized.scope) token.payload.scope = authorized.scope;
    const resource = body.resource ?? authorized.resource;
    if (resource) token.payload.aud = resource;
  } else if (body.grant_type === 'client_credentials') {
    token.payload.sub = body.client_id ?? subject;
    if (body.resource) token.payload.aud = body.resource;
  }
});

// The token answer states the scope granted (the mock would say "dummy").
server.service.on('beforeResponse', (response, req) => {
  const body = req.body ?? {};
  if (body.grant_type === 'authorization_code') {
    const scope = asked.get(body.code)?.scope;
    if (scope) response.body.scope = scope;
  }
});

server.service.on('beforeWellKnownOpenIdConfiguration', (response) => {
  response.body.registration_endpoint = `${server.issuer.url}/register`;
  response.body.token_endpoint_auth_methods_supported = ['none', 'client_secret_basic', 'client_secret_post'];
  response.body.scopes_supported = ['openid', 'mountfs'];
});

const json = (res, status, body) => {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
};

server.service.addRoute('POST', '/register', (req, res) => {
  json(res, 201, {
    ...req.body,
    client_id: randomUUID(),
    client_id_issued_at: Math.floor(Date.now() / 1000),
    token_endpoint_auth_method: req.body?.token_endpoint_auth_method ?? 'none',
  });
});

server.service.addRoute('POST', '/test/mint', async (req, res) => {
  const { header = {}, claims = {}, expiresIn = 3600 } = req.body ?? {};
  const token = await server.issuer.buildToken({
    expiresIn,
    scopesOrTransform: (tokenHeader, payload) => {
      Object.assign(tokenHeader, header);
      for (const [name, value] of Object.entries(claims)) {
        if (value === null) delete payload[name];
        else payload[name] = value;
      }
    },
  });
  json(res, 200, { token });
});

server.service.addRoute('POST', '/test/rotate', async (_req, res) => {
  retired.add(current);
  current = (await store.generate('RS256')).kid;
  json(res, 200, { kid: current, keys: store.toJSON().map((key) => key.kid) });
});

await server.start(port, "127.0.0.1");
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
process.stdout.write(`ready ${server.issuer.url}\n`);

process.stdin.resume();
process.stdin.on('end', () => server.stop().then(() => process.exit(0)));
process.stdin.on('close', () => server.stop().then(() => process.exit(0)));
