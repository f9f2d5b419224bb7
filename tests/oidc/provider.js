// A real OpenID Connect provider (panva's oidc-provider) for the single sign-on
// tests: one confidential client and a few accounts whose claims the tests know.
// Its development login form takes any password; the account is the login name.
//
//   PORT=... CLIENT_ID=... CLIENT_SECRET=... REDIRECT_URI=... \
//   POST_LOGOUT_REDIRECT_URI=... node tests/oidc/provider.js
//
// Prints "oidc-provider ready at <issuer>" once it listens.
import { createHmac } from 'node:crypto';
import Provider from 'oidc-provider';

const required = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`provider.js: ${name} must be set`);
    process.exit(2);
  }
  return value;
};

const port = Number(required('PORT'));
const issuer = `http://127.0.0.1:${port}`;

// The tests' people: who is allowed, who may use the terminal, who lacks a claim.
const ACCOUNTS = {
  alice: {
    preferred_username: 'alice', email: 'alice@example.org', email_verified: true,
    name: 'Alice Example', groups: ['neotask-users', 'neotask-terminal'],
  },
  bob: {
    preferred_username: 'bob', email: 'bob@example.org', email_verified: true,
    name: 'Bob Example', groups: ['neotask-users'],
  },
  mallory: {
    preferred_username: 'mallory', email: 'mallory@example.org', email_verified: false,
    name: 'Mallory Example', groups: ['contractors'],
  },
  nameless: {
    email: 'nameless@example.org', email_verified: true, groups: ['neotask-users'],
  },
  // Other subjects calling themselves alice: the same name, and a fullwidth lookalike.
  'alice-impostor': {
    preferred_username: 'alice', email: 'impostor@example.org', email_verified: true,
    groups: ['neotask-users'],
  },
  'alice-fullwidth': {
    preferred_username: '\uff41\uff4c\uff49\uff43\uff45', groups: ['neotask-users'],
  },
  // Their ID tokens leave the token endpoint re-signed as a forger would: unsigned
  // ("alg": "none"), or with the client secret as an HMAC key (HS256).
  unsigned: { preferred_username: 'unsigned', groups: ['neotask-users'] },
  hmac: { preferred_username: 'hmac', groups: ['neotask-users'] },
};

const configuration = {
  clients: [{
    client_id: required('CLIENT_ID'),
    client_secret: required('CLIENT_SECRET'),
    redirect_uris: [required('REDIRECT_URI')],
    post_logout_redirect_uris: [required('POST_LOGOUT_REDIRECT_URI')],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const account = ACCOUNTS[id];
    if (!account) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...account }; } };
  },
  // The client is first-party: no consent screen, every requested scope granted.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
};

const provider = new Provider(issuer, configuration);

const base64url = (value) => Buffer.from(value).toString('base64url');
const FORGED = {
  unsigned: (header, payload) => `${base64url(JSON.stringify({ alg: 'none' }))}.${payload}.`,
  hmac: (header, payload) => {
    const signed = `${base64url(JSON.stringify({ ...header, alg: 'HS256' }))}.${payload}`;
    const signature = createHmac('sha256', required('CLIENT_SECRET')).update(signed).digest();
    return `${signed}.${base64url(signature)}`;
  },
};
provider.use(async (ctx, next) => {
  await next();
  const token = ctx.path === '/token' && ctx.body?.id_token;
  if (!token) return;
  const [header, payload] = token.split('.');
  const { sub } = JSON.parse(Buffer.from(payload, 'base64url'));
  if (FORGED[sub]) {
    ctx.body.id_token = FORGED[sub](JSON.parse(Buffer.from(header, 'base64url')), payload);
  }
});
provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider ready at ${issuer}`);
});
