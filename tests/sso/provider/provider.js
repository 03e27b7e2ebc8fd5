// A real OpenID Connect provider (the certified `oidc-provider` package) for the board's
// single sign-on tests. Its development interactions accept any login: the login typed is
// the account id, and an account id that is an email is that person's `email` claim.
// "unverified+someone@example.com" signs in as someone@example.com with
// email_verified=false.
//
// Environment: PORT (required), CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS (comma-separated).
// Prints "listening <issuer>" once it accepts connections.
import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;

function claimsOf(accountId) {
  const unverified = accountId.startsWith('unverified+');
  const email = unverified ? accountId.slice('unverified+'.length) : accountId;
  const claims = { sub: accountId };
  if (email.includes('@')) {
    claims.email = email;
    claims.email_verified = !unverified;
  }
  return claims;
}

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.CLIENT_ID || 'gua-board',
      client_secret: process.env.CLIENT_SECRET || 'test-client-secret-0123456789',
      redirect_uris: (process.env.REDIRECT_URIS || '').split(',').filter(Boolean),
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  // PKCE for every client, confidential ones too.
  pkce: { required: () => true },
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  // The requested scopes' claims go into the ID token itself (the board reads them there).
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => claimsOf(id) }),
  cookies: { keys: ['gua-board-test-provider-cookie-key'] },
});
provider.proxy = false;

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
