/**
 * A URL as we show it: without the user name and password it may carry. New endpoints cannot have
 * them (registration refuses them), but endpoints registered before can, and their URL is shown in
 * the API, on the dashboard and in the email that says an endpoint was disabled. The sender still
 * uses the full URL: the receiver may depend on it.
 */
export function redactUrl(url: string): string {
  if (!URL.canParse(url)) return url;
  const u = new URL(url);
  if (u.username === '' && u.password === '') return url;
  u.username = 'redacted';
  u.password = '';
  return u.toString();
}

/** True when the URL carries a user name or a password. */
export function hasCredentials(url: string): boolean {
  return URL.canParse(url) && (new URL(url).username !== '' || new URL(url).password !== '');
}
