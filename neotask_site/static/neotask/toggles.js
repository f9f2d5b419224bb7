// Buttons that show and hide a part of the page (data-toggle, aria-controls):
// the navigation on narrow screens, the chat list. Loaded in <head> so the
// parts start hidden; without this script they stay shown.
document.documentElement.classList.add("toggles");
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-toggle]");
  if (!button) return;
  const open = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", String(open));
  document.getElementById(button.getAttribute("aria-controls")).classList.toggle("open", open);
});

// The navigation's groups (<details class="nav-group">, which the keyboard opens
// as any summary): one open at a time; Esc, or a click elsewhere, closes them.
const openGroups = () => document.querySelectorAll("details.nav-group[open]");
document.addEventListener("toggle", (event) => {
  const group = event.target;
  if (!group.matches("details.nav-group") || !group.open) return;
  openGroups().forEach((other) => { if (other !== group) other.open = false; });
}, true);  // toggle events do not bubble
document.addEventListener("click", (event) => {
  openGroups().forEach((group) => { if (!group.contains(event.target)) group.open = false; });
});
document.addEventListener("keydown", (event) => {
  const group = event.key === "Escape" ? openGroups()[0] : null;
  if (!group) return;
  event.preventDefault();
  event.stopImmediatePropagation();  // the Esc closes the menu, not the answer (chat.js)
  group.open = false;
  group.querySelector("summary").focus();
});
