/** `.lua` files are bundled as text (wrangler `rules` of type Text). */
declare module "*.lua" {
  const text: string;
  export default text;
}
