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
