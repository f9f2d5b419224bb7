// A real OpenID Connect provider (panva's oidc-provider) for the single sign-on
// tests: one confidential client and a few accounts whose claims the tests know.
// Its development login form takes any password; the account is the login name.
//
//   PORT=... CLIENT_ID=... CLIENT_SECRET=... REDIRECT_URI=... \
//   POST_LOGOUT_REDIRECT_URI=... node tests/oidc/provider.js
//
// Prints "oidc-provider ready at <issuer>" once it listens.
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
provider.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider ready at ${issuer}`);
});
