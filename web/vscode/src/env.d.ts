interface ImportMeta {
  readonly env: { readonly BASE_URL: string };
}
